package recordlock_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// packageDoc parses the package's own source (not its tests) for its documentation.
func packageDoc(t *testing.T) *doc.Package {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/recordlock/recordlock")
	require.NoError(t, err)
	return p
}

// Every exported function and method that returns an error says in its doc comment what it
// returns on each failure, as golang.org/x/sync/semaphore does: each names the errors listed
// here, and one missing from the list fails the test until its errors are written down.
func TestDocNamesEveryError(t *testing.T) {
	lockErrs := []string{"ErrInvalidOptions", "ErrInvalidKey", "ErrClosed", "ErrTimeout", "ErrClusterUnavailable", "ctx"}
	writeErrs := []string{"ErrInvalidKey", "ErrTxnDone", "ErrClosed", "ErrLeaseExpired", "ErrReleased", "ErrNotLocked"}
	cf := []string{"ErrInvalidOptions", "column famil"}
	want := map[string][]string{
		"New":                     {"ErrInvalidOptions", "*OptionError", "WithMaxLocks"},
		"Locker.BeginTx":          {"ErrInvalidOptions"},
		"Locker.Close":            {"returns nil"},
		"Locker.Lock":             append([]string{"ErrTooManyLocks"}, lockErrs...),
		"Locker.LockCF":           append([]string{"errors of Lock"}, cf...),
		"Locker.TryLock":          append([]string{"ErrLocked", "ErrTooManyLocks"}, lockErrs[:5]...),
		"Locker.TryLockCF":        cf,
		"Handle.Fence":            {"ErrLeaseExpired", "ErrClosed", "commit's error"},
		"Handle.Renew":            {"*OptionError", "ErrReleased", "ErrLeaseExpired"},
		"Handle.UpgradeToHold":    {"*OptionError", "ErrReleased", "ErrLeaseExpired"},
		"Options.Resolve":         {"*OptionError", "ErrInvalidOptions"},
		"Txn.Commit":              {"ErrLeaseExpired", "ErrClosed", "ErrTxnDone", "RocksDB write"},
		"Txn.Get":                 {"ErrLeaseExpired", "ErrInvalidKey", "ErrTxnDone", "ErrClosed", "RocksDB error"},
		"Txn.GetCF":               cf,
		"Txn.Lock":                append([]string{"ErrTooManyLocks", "ErrTxnDone", "ErrScopeConflict", "ErrDeadlock", "ErrLeaseExpired", "ErrReleased"}, lockErrs...),
		"Txn.LockCF":              cf,
		"Txn.LockAll":             append([]string{"ErrTooManyLocks", "ErrTxnDone", "ErrScopeConflict", "ErrDeadlock", "ErrLeaseExpired", "ErrReleased"}, lockErrs...),
		"Txn.LockAllCF":           cf,
		"Txn.Put":                 writeErrs,
		"Txn.Delete":              writeErrs,
		"Txn.PutCF":               cf,
		"Txn.DeleteCF":            {"ErrInvalidOptions", "PutCF"},
		"Txn.RollbackToSavePoint": {"ErrNoSavePoint", "ErrTxnDone", "ErrClosed"},
		"Txn.Scan":                {"ErrLeaseExpired", "ErrInvalidKey", "ErrTxnDone", "ErrClosed", "RocksDB error", "error from fn"},
		"Txn.ScanCF":              cf,
		"Locker.LockRange":        append([]string{"ScopeCluster", "ErrTooManyLocks"}, lockErrs[:4]...),
		"Locker.LockRangeCF":      cf,
		"Locker.TryLockRange":     append([]string{"ErrLocked", "ErrTooManyLocks"}, lockErrs[:3]...),
		"Locker.TryLockRangeCF":   cf,
		"Txn.LockRange":           append([]string{"ErrTooManyLocks", "ErrTxnDone", "ErrDeadlock", "ErrLeaseExpired", "ErrReleased", "ScopeCluster"}, lockErrs[:4]...),
		"Txn.LockRangeCF":         cf,
	}

	got := map[string]string{} // every exported function or method returning an error: its doc
	add := func(recv string, fns []*doc.Func) {
		for _, fn := range fns {
			res := fn.Decl.Type.Results
			if res == nil || !ast.IsExported(fn.Name) {
				continue
			}
			if last, ok := res.List[len(res.List)-1].Type.(*ast.Ident); !ok || last.Name != "error" {
				continue
			}
			name := fn.Name
			if recv != "" {
				name = recv + "." + fn.Name
			}
			got[name] = fn.Doc
		}
	}
	p := packageDoc(t)
	add("", p.Funcs)
	for _, typ := range p.Types {
		add("", typ.Funcs)
		add(typ.Name, typ.Methods)
	}
	for name, d := range got {
		errs, ok := want[name]
		if !assert.True(t, ok, "%s returns an error: list what its doc must name", name) {
			continue
		}
		for _, e := range errs {
			assert.Contains(t, d, e, "the doc of %s", name)
		}
	}
	for name := range want {
		assert.Contains(t, got, name, "no exported %s returning an error", name)
	}
}

// The parts of the API only coordinator and database authors call are grouped under two sections
// of the package documentation, which their own doc comments point to.
func TestDocSectionsForCoordinatorAndDatabaseAuthors(t *testing.T) {
	p := packageDoc(t)
	for _, heading := range []string{"# Writing a coordinator", "# Version stamps"} {
		assert.Contains(t, p.Doc, "\n"+heading+"\n")
	}
	docs := map[string]string{}
	for _, typ := range p.Types {
		docs[typ.Name] = typ.Doc
		for _, fn := range append(typ.Funcs, typ.Methods...) {
			docs[typ.Name+"."+fn.Name] = fn.Doc
		}
	}
	for name, section := range map[string]string{
		"Coordinator":                   "Writing a coordinator",
		"Round":                         "Writing a coordinator",
		"Options.Resolve":               "Writing a coordinator",
		"Resolved":                      "Writing a coordinator",
		"Handle.JoinClusterRound":       "Writing a coordinator",
		"Handle.HolderVersionCandidate": "Version stamps",
		"Handle.NextHolderVersion":      "Version stamps",
		"Handle.NoteCandidateFloor":     "Version stamps",
		"Handle.NoteHolderVersion":      "Version stamps",
	} {
		oneLine := strings.Join(strings.Fields(docs[name]), " ")
		assert.Contains(t, oneLine, section, "the doc of %s", name)
	}
}

// Every field of the structs a user reads figures from says what it holds, in words a user knows.
func TestDocFieldsSayWhatTheyHold(t *testing.T) {
	p := packageDoc(t)
	for _, typ := range p.Types {
		switch typ.Name {
		case "Stats", "LockInfo", "WaitInfo", "Resolved", "Options", "TxnOptions", "Round":
		default:
			continue
		}
		st := typ.Decl.Specs[0].(*ast.TypeSpec).Type.(*ast.StructType)
		for _, f := range st.Fields.List {
			text := f.Doc.Text() + f.Comment.Text()
			assert.NotEmpty(t, text, "%s.%s has no comment", typ.Name, f.Names[0].Name)
			for _, jargon := range []string{"settle", "unwatched"} {
				assert.NotContains(t, text, jargon, "%s.%s", typ.Name, f.Names[0].Name)
			}
		}
	}
}
