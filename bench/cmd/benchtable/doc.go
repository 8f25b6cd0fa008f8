package main

import (
	"fmt"
	"os"
	"strings"
)

// A region of the document is the lines between a line `<!-- benchtable:NAME -->` and the next
// line `<!-- end -->`; benchtable rewrites the lines between with the section NAME and keeps every
// other line as it is.
const (
	regionStart = "<!-- benchtable:"
	regionOpen  = " -->"
	regionEnd   = "<!-- end -->"
)

// rewriteDoc rewrites each region of the markdown file with its section. A region whose section
// is "" (the input has no results for it) keeps its lines. A region that names no section, or
// that does not end, or that starts inside another, is an error and leaves the file as it was.
func rewriteDoc(file string, secs []section) error {
	old, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	doc, err := rewriteRegions(old, secs)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return os.WriteFile(file, doc, 0o644)
}

// rewriteRegions returns doc with each region's lines replaced by its section, framed by a blank
// line either side so that a markdown table in it stands apart from the markers.
func rewriteRegions(doc []byte, secs []section) ([]byte, error) {
	text := map[string]string{}
	for _, s := range secs {
		text[s.name] = s.text
	}
	lines := strings.SplitAfter(string(doc), "\n")
	var out strings.Builder
	for i := 0; i < len(lines); i++ {
		out.WriteString(lines[i])
		name, ok := regionName(lines[i])
		if !ok {
			continue
		}
		sec, known := text[name]
		if !known {
			return nil, fmt.Errorf("line %d: no section %q (sections: %s)", i+1, name, sectionNames(secs))
		}
		end := i + 1
		for end < len(lines) && strings.TrimSpace(lines[end]) != regionEnd {
			if _, nested := regionName(lines[end]); nested {
				return nil, fmt.Errorf("line %d: region %q starts before region %q ends", end+1, lines[end], name)
			}
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("line %d: region %q has no %s line", i+1, name, regionEnd)
		}
		if sec == "" {
			for _, l := range lines[i+1 : end] {
				out.WriteString(l)
			}
		} else {
			out.WriteString("\n" + strings.TrimRight(sec, "\n") + "\n\n")
		}
		out.WriteString(lines[end])
		i = end
	}
	return []byte(out.String()), nil
}

// regionName returns the name of the region that line starts, if it starts one.
func regionName(line string) (string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), regionStart)
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, regionOpen)
}

func sectionNames(secs []section) string {
	names := make([]string, len(secs))
	for i, s := range secs {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}
