package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// mutant is one stanza of the catalogue.
type mutant struct {
	name, file, from, after, to, rule string
	pkg, run, args                    string
	timeout                           time.Duration
	source                            string // catalogue file and line, for messages
}

// mutate returns the content of the file at path with m applied.
func mutate(path string, m mutant) ([]byte, error) {
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.SplitAfter(string(content), "\n")
	find := func(want string, from int) []int {
		var at []int
		for i := from; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == want {
				at = append(at, i)
			}
		}
		return at
	}
	start := 0
	if m.after != "" {
		at := find(m.after, 0)
		if len(at) != 1 {
			return nil, fmt.Errorf("after: %q matches %d lines of %s, not one", m.after, len(at), m.file)
		}
		start = at[0] + 1
	}
	at := find(m.from, start)
	if len(at) == 0 || (m.after == "" && len(at) > 1) {
		return nil, fmt.Errorf("from: %q matches %d lines of %s, not one", m.from, len(at), m.file)
	}
	i := at[0]
	if m.to == "" {
		lines[i] = ""
	} else {
		line := lines[i]
		indentation := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		lines[i] = indentation + m.to + "\n"
	}
	return []byte(strings.Join(lines, "")), nil
}

// readCatalogue reads every *.txt file of dir, in name order.
func readCatalogue(dir string) ([]mutant, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var all []mutant
	names := map[string]string{}
	for _, file := range files {
		ms, err := readCatalogueFile(file)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if prev, ok := names[m.name]; ok {
				return nil, fmt.Errorf("%s: mutant %q is also at %s", m.source, m.name, prev)
			}
			names[m.name] = m.source
		}
		all = append(all, ms...)
	}
	return all, nil
}

func readCatalogueFile(path string) ([]mutant, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		all    []mutant
		fields map[string]string
		first  int
	)
	finish := func() error {
		if fields == nil {
			return nil
		}
		source := fmt.Sprintf("%s:%d", filepath.Base(path), first)
		for _, key := range []string{"mutant", "file", "from", "rule", "pkg", "run"} {
			if fields[key] == "" {
				return fmt.Errorf("%s: no %q line", source, key+":")
			}
		}
		if _, ok := fields["to"]; !ok {
			return fmt.Errorf("%s: no to: (an empty to: deletes the line)", source)
		}
		timeout := 120 * time.Second
		if s := fields["timeout"]; s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				return fmt.Errorf("%s: timeout: %w", source, err)
			}
			timeout = d
		}
		all = append(all, mutant{
			name: fields["mutant"], file: fields["file"], from: fields["from"], after: fields["after"],
			to: fields["to"], rule: fields["rule"], pkg: fields["pkg"], run: fields["run"],
			args: fields["args"], timeout: timeout, source: source,
		})
		fields = nil
		return nil
	}
	known := map[string]bool{"mutant": true, "file": true, "from": true, "after": true, "to": true,
		"rule": true, "pkg": true, "run": true, "args": true, "timeout": true}
	scanner := bufio.NewScanner(f)
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		switch {
		case strings.TrimSpace(line) == "":
			if err := finish(); err != nil {
				return nil, err
			}
			continue
		case strings.HasPrefix(strings.TrimSpace(line), "#"):
			continue
		}
		key, value, ok := strings.Cut(line, ":")
		key = strings.TrimSpace(key)
		if !ok || !known[key] {
			return nil, fmt.Errorf("%s:%d: want key: value, one of mutant, file, from, after, to, rule, pkg, run, args, timeout", filepath.Base(path), n)
		}
		if fields == nil {
			fields, first = map[string]string{}, n
		}
		if _, dup := fields[key]; dup {
			return nil, fmt.Errorf("%s:%d: %s: given twice in one stanza", filepath.Base(path), n, key)
		}
		fields[key] = strings.TrimSpace(value)
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	if err := finish(); err != nil {
		return nil, err
	}
	return all, nil
}
