// Command mutants checks that the tests defend the code's guards: for each mutant of the catalogue
// (mutants/catalogue/*.txt), a one-line change that removes or inverts a guard, it applies the
// change to a copy of the tree, runs the test named to kill it, and fails when the test still
// passes, times out, or does not build. `make mutants` runs it from the repository's root.
//
// A catalogue file holds stanzas separated by blank lines; a line starting with # is a comment:
//
//	mutant:  a short name
//	file:    the file to change, from the repository's root
//	from:    the line to change, compared with the file's lines trimmed of spaces; it must match
//	         exactly one line, or the first line after the one that `after:` names uniquely
//	after:   (optional) a trimmed line that comes before `from:`, when `from:` alone is not unique
//	to:      the line that replaces it, indented as the original; empty deletes the line
//	rule:    the rule the guard keeps, in words or as a section of docs/DESIGN.md
//	pkg:     the test package's folder, from the repository's root (. for the root package)
//	run:     the -run pattern of the test that kills the mutant
//	args:    (optional) more go test flags, as -race
//	timeout: (optional) how long the test may run, 120s when not given
//
// Before any mutant, each killing test runs on the unchanged copy and must pass there: a test that
// fails anyway proves nothing. A mutant is killed only when its test fails with a `--- FAIL`; a
// test that times out has not named a broken rule.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// killer is the test a mutant names; mutants that name the same one share its run on the
// unchanged tree.
type killer struct{ pkg, run, args string }

func (m mutant) killer() killer { return killer{m.pkg, m.run, m.args} }

// outcome is what one run of a killing test showed.
type outcome struct {
	verdict string // killed, survived, timed out, does not build, failed without --- FAIL; passed or failed for a baseline
	elapsed time.Duration
	output  string
}

func main() {
	catalogue := flag.String("catalogue", "mutants/catalogue", "folder of the catalogue files")
	workers := flag.Int("workers", 2, "mutants run at once, each in its own copy of the tree")
	only := flag.String("only", "", "run only the mutants whose name matches this pattern")
	flag.Parse()
	if err := run(*catalogue, *workers, *only); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func run(catalogue string, workers int, only string) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(catalogue) {
		catalogue = filepath.Join(root, catalogue)
	}
	mutants, err := readCatalogue(catalogue)
	if err != nil {
		return err
	}
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			return fmt.Errorf("-only: %w", err)
		}
		kept := mutants[:0]
		for _, m := range mutants {
			if re.MatchString(m.name) {
				kept = append(kept, m)
			}
		}
		mutants = kept
	}
	if len(mutants) == 0 {
		return fmt.Errorf("no mutants to run in %s", catalogue)
	}
	for _, m := range mutants {
		if _, err := mutate(filepath.Join(root, m.file), m); err != nil {
			return fmt.Errorf("%s: %w", m.source, err)
		}
	}
	workers = max(1, min(workers, len(mutants)))
	copies := make([]string, workers)
	for i := range copies {
		dir, err := os.MkdirTemp("", "mutants-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := copyTree(root, dir); err != nil {
			return fmt.Errorf("copy the tree: %w", err)
		}
		copies[i] = dir
	}
	start := time.Now()

	// The killing tests on the unchanged tree first, those of one package and flags in one run.
	batches := baselineBatches(mutants)
	baseline := make([]outcome, len(batches))
	parallel(copies, len(batches), func(dir string, i int) {
		baseline[i] = runTest(dir, batches[i].mutant)
		if baseline[i].verdict != "passed" && len(batches[i].runs) > 1 {
			// Say which: each test of the batch again, alone.
			var failed []string
			for _, run := range batches[i].runs {
				m := batches[i].mutant
				m.run = run
				if runTest(dir, m).verdict != "passed" {
					failed = append(failed, run)
				}
			}
			baseline[i].output += "\nfailing alone: " + strings.Join(failed, ", ")
		}
	})
	var failing []string
	for i, b := range batches {
		fmt.Printf("baseline %-14s %3d tests  %-9s %5.1fs\n", b.pkg, len(b.runs), baseline[i].verdict, baseline[i].elapsed.Seconds())
		if baseline[i].verdict != "passed" {
			failing = append(failing, b.run)
			fmt.Println(indent(tail(baseline[i].output, 30)))
		}
	}
	if len(failing) > 0 {
		return fmt.Errorf("killing tests fail on the unchanged tree: %s", strings.Join(failing, "; "))
	}

	results := make([]outcome, len(mutants))
	parallel(copies, len(mutants), func(dir string, i int) {
		results[i] = runMutant(dir, mutants[i])
	})
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\nmutant\tkilling test\tseconds\tresult")
	var alive []string
	for i, m := range mutants {
		fmt.Fprintf(w, "%s\t%s (%s)\t%.1f\t%s\n", m.name, m.run, m.pkg, results[i].elapsed.Seconds(), results[i].verdict)
		if results[i].verdict != "killed" {
			alive = append(alive, m.name)
		}
	}
	w.Flush()
	for i, m := range mutants {
		if results[i].verdict != "killed" {
			fmt.Printf("\n%s (%s) %s; it breaks: %s\n%s\n", m.name, m.source, results[i].verdict, m.rule, indent(tail(results[i].output, 30)))
		}
	}
	fmt.Printf("\n%d mutants, %d killed, in %s\n", len(mutants), len(mutants)-len(alive), time.Since(start).Round(time.Second))
	if len(alive) > 0 {
		return fmt.Errorf("not killed: %s", strings.Join(alive, ", "))
	}
	return nil
}

// batch is a run of several killing tests of one package and flags, on the unchanged tree.
type batch struct {
	mutant          // pkg, args and timeout of the batch; run, every pattern of runs
	runs   []string // the -run patterns of its tests
}

// baselineBatches groups the distinct killing tests by package and flags. A pattern with a
// subtest (a /) runs alone: -run patterns are matched level by level, so two cannot be joined.
func baselineBatches(mutants []mutant) []batch {
	var batches []batch
	at := map[string]int{}
	seen := map[killer]bool{}
	for _, m := range mutants {
		if seen[m.killer()] {
			continue
		}
		seen[m.killer()] = true
		group := m.pkg + "\x00" + m.args
		if strings.Contains(m.run, "/") {
			group += "\x00" + m.run
		}
		i, ok := at[group]
		if !ok {
			i = len(batches)
			at[group] = i
			batches = append(batches, batch{mutant: m})
			batches[i].timeout = 0
		}
		b := &batches[i]
		b.runs = append(b.runs, m.run)
		b.run = strings.Join(b.runs, "|")
		b.timeout += m.timeout
	}
	return batches
}

// parallel calls f for each of n items, one copy of the tree to each worker at a time.
func parallel(copies []string, n int, f func(dir string, i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for _, dir := range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(dir, i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// runMutant applies m to the copy in dir, runs its killing test and puts the file back.
func runMutant(dir string, m mutant) outcome {
	path := filepath.Join(dir, m.file)
	original, err := os.ReadFile(path)
	if err != nil {
		return outcome{verdict: "does not build", output: err.Error()}
	}
	changed, err := mutate(path, m)
	if err == nil {
		err = os.WriteFile(path, changed, 0o644)
	}
	if err != nil {
		return outcome{verdict: "does not build", output: err.Error()}
	}
	defer os.WriteFile(path, original, 0o644)
	o := runTest(dir, m)
	switch o.verdict {
	case "passed":
		o.verdict = "survived"
	case "failed":
		o.verdict = "killed"
	}
	return o
}

// runTest runs m's killing test in the copy in dir: passed, failed (with a --- FAIL), timed out,
// does not build, or failed without --- FAIL.
func runTest(dir string, m mutant) outcome {
	// The test's own -timeout panics with the goroutines' stacks; the context is a backstop that
	// also covers the build.
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout+5*time.Minute)
	defer cancel()
	args := []string{"test", "-count=1", "-timeout", m.timeout.String(), "-run", m.run}
	args = append(args, strings.Fields(m.args)...)
	args = append(args, ".")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Join(dir, m.pkg)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	o := outcome{elapsed: time.Since(start), output: out.String()}
	switch {
	case err == nil && strings.Contains(o.output, "no tests to run"):
		o.verdict = "does not build" // a -run that matches nothing proves nothing
	case err == nil:
		o.verdict = "passed"
	case strings.Contains(o.output, "panic: test timed out") || ctx.Err() != nil:
		o.verdict = "timed out"
	case strings.Contains(o.output, "[build failed]") || strings.Contains(o.output, "[setup failed]"):
		o.verdict = "does not build"
	case strings.Contains(o.output, "--- FAIL"):
		o.verdict = "failed"
	default:
		o.verdict = "failed without --- FAIL"
	}
	return o
}
func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }
