// Package kernels holds the Metal Shading Language sources of the Metal backend: the
// kernels (*.metal), the argument structs they share with the host (args*.h, mirrored in
// args*.go), and common helpers (common.h). Both devices compile Source(): the Metal
// device with newLibraryWithSource, the harness with clang.
package kernels

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"sync"
)

//go:embed *.metal *.h
var files embed.FS

var (
	reInclude = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[^\n]*$`)
	// #pragma once is done by the inlining itself; left in, it warns in a single source.
	rePragmaOnce = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*pragma[ \t]+once[ \t]*$`)
)

var source struct {
	sync.Once
	text string
	err  error
}

// Source is the whole library: every .metal file in name order with our own headers
// inlined where they are first included (Metal's newLibraryWithSource cannot resolve
// includes), each part under a #line directive so that compiler messages name the
// original file and line. It panics if the embedded sources include a header that does not
// exist, which TestSource catches.
func Source() string {
	source.Do(func() { source.text, source.err = build(files) })
	if source.err != nil {
		panic(source.err)
	}
	return source.text
}

func build(fsys fs.FS) (string, error) {
	names, err := fs.Glob(fsys, "*.metal")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	var b strings.Builder
	done := map[string]bool{}
	for _, n := range names {
		if err := inline(fsys, n, &b, done, nil); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

func buildFile(fsys fs.FS, name string) (string, error) {
	var b strings.Builder
	if err := inline(fsys, name, &b, map[string]bool{}, nil); err != nil {
		return "", err
	}
	return b.String(), nil
}

// inline writes file name with its includes expanded; a header already written is skipped
// (every header once, as #pragma once would).
func inline(fsys fs.FS, name string, b *strings.Builder, done map[string]bool, stack []string) error {
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		if len(stack) > 0 {
			return fmt.Errorf("kernels: %s includes %q, which is not a file of the package", stack[len(stack)-1], name)
		}
		return err
	}
	done[name] = true
	text := rePragmaOnce.ReplaceAllString(string(data), "")
	fmt.Fprintf(b, "#line 1 %q\n", name)
	at, line := 0, 1
	for _, m := range reInclude.FindAllStringSubmatchIndex(text, -1) {
		b.WriteString(text[at:m[0]])
		line += strings.Count(text[at:m[0]], "\n")
		inc := text[m[2]:m[3]]
		if !done[inc] {
			b.WriteString("\n")
			if err := inline(fsys, inc, b, done, append(stack, name)); err != nil {
				return err
			}
			fmt.Fprintf(b, "\n#line %d %q", line+1, name)
		}
		at = m[1]
	}
	b.WriteString(text[at:])
	if !strings.HasSuffix(text, "\n") {
		b.WriteString("\n")
	}
	return nil
}
