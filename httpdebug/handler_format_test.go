package httpdebug_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"net/http"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/httpdebug"
)

// The formats Handler's documentation lists are exactly those it serves: format=html is the page,
// as no format is, format=json the JSON, and every other value a 400.
func TestFormatsAreTheDocumentedOnes(t *testing.T) {
	db, _ := openDB(t)
	_, l := manual(t, db)
	_, err := l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)
	h := httpdebug.Handler(map[string]*recordlock.Locker{"orders": l})

	var served []string
	for _, format := range []string{"html", "json", "HTML", "JSON", "xml", "text", "htm", ""} {
		code, _, _ := get(t, h, http.MethodGet, "/?format="+format)
		if code == http.StatusOK {
			served = append(served, format)
		} else {
			assert.Equal(t, http.StatusBadRequest, code, "format=%s", format)
		}
	}
	assert.Equal(t, documentedFormats(t), served, "the formats Handler's doc lists and those it serves")

	_, _, page := get(t, h, http.MethodGet, "/")
	code, hdr, html := get(t, h, http.MethodGet, "/?format=html&limit=1000")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "text/html; charset=utf-8", hdr.Get("Content-Type"))
	assert.Equal(t, page, html, "format=html is the page")
}

// documentedFormats returns the values of format that Handler's doc comment lists, in order.
func documentedFormats(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "handler.go", nil, parser.ParseComments)
	require.NoError(t, err)
	pkg, err := doc.NewFromFiles(fset, []*ast.File{f}, "github.com/recordlock/recordlock/httpdebug")
	require.NoError(t, err)
	i := slices.IndexFunc(pkg.Funcs, func(f *doc.Func) bool { return f.Name == "Handler" })
	require.GreaterOrEqual(t, i, 0, "Handler is documented")
	var formats []string
	for _, m := range regexp.MustCompile(`(?m)^\s+- format=(\w+)`).FindAllStringSubmatch(pkg.Funcs[i].Doc, -1) {
		formats = append(formats, m[1])
	}
	require.NotEmpty(t, formats, "Handler's doc lists its formats")
	return formats
}
