package kernels

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestBuildInlines(t *testing.T) {
	fsys := fstest.MapFS{
		"a.metal": {Data: []byte("#include \"x.h\"\nkernel a\n")},
		"b.metal": {Data: []byte("#include \"x.h\"\n#include \"y.h\"\nkernel b\n")},
		"x.h":     {Data: []byte("#pragma once\n#include \"y.h\"\nint x;\n")},
		"y.h":     {Data: []byte("int y;\n")},
	}
	got, err := build(fsys)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"int x;", "int y;"} {
		if n := strings.Count(got, s); n != 1 {
			t.Errorf("%q appears %d times in\n%s", s, n, got)
		}
	}
	if strings.Contains(got, "pragma once") {
		t.Errorf("#pragma once left in\n%s", got)
	}
	// After x.h is inlined, a.metal's next line is its line 2.
	if !strings.Contains(got, "#line 2 \"a.metal\"\nkernel a") {
		t.Errorf("no #line 2 \"a.metal\" before a.metal's second line in\n%s", got)
	}
}

func TestBuildUnknownInclude(t *testing.T) {
	fsys := fstest.MapFS{"a.metal": {Data: []byte("#include \"nope.h\"\n")}}
	if _, err := build(fsys); err == nil || !strings.Contains(err.Error(), "a.metal includes \"nope.h\"") {
		t.Fatalf("got %v, want an error naming a.metal and nope.h", err)
	}
}
