package kernels_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/redlite/batch/metalkit/harness"
	"github.com/redlite/batch/metalkit/kernels"
)

var (
	reStruct = regexp.MustCompile(`(?s)\bstruct\s+([A-Za-z_]\w*_args)\s*\{(.*?)\}\s*;`)
	reField  = regexp.MustCompile(`^([A-Za-z_][\w\s]*?)\s+([A-Za-z_]\w*)\s*(?:\[\s*(\w+)\s*\])?$`)
	reCmt    = regexp.MustCompile(`(?s)//[^\n]*|/\*.*?\*/`)
)

type cField struct{ name string }

// cStructs reads the *_args structs of a header: names and field names in order.
func cStructs(src string) (map[string][]cField, []string, error) {
	src = reCmt.ReplaceAllString(src, "")
	structs := map[string][]cField{}
	var order []string
	for _, m := range reStruct.FindAllStringSubmatch(src, -1) {
		var fields []cField
		for _, decl := range strings.Split(m[2], ";") {
			decl = strings.TrimSpace(decl)
			if decl == "" {
				continue
			}
			f := reField.FindStringSubmatch(decl)
			if f == nil || strings.Contains(f[2], ",") {
				return nil, nil, fmt.Errorf("struct %s: cannot read field %q (one fixed-size field per declaration)", m[1], decl)
			}
			fields = append(fields, cField{name: f[2]})
		}
		structs[m[1]] = fields
		order = append(order, m[1])
	}
	return structs, order, nil
}

func normName(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }

// layoutProblems compares clang's layout of the structs in header with their Go mirrors.
func layoutProblems(t *testing.T, header string, mirrors map[string]any) []string {
	t.Helper()
	structs, order, err := cStructs(header)
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	for _, name := range order {
		if _, ok := mirrors[name]; !ok {
			problems = append(problems, fmt.Sprintf("struct %s has no Go mirror", name))
		}
	}
	var names []string
	for name := range mirrors {
		if _, ok := structs[name]; !ok {
			problems = append(problems, fmt.Sprintf("Go mirror %T of %s: no such struct in the headers", mirrors[name], name))
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return problems
	}
	var body strings.Builder
	for _, name := range names {
		fmt.Fprintf(&body, "printf(\"%s %%zu\", sizeof(%s));\n", name, name)
		for _, f := range structs[name] {
			fmt.Fprintf(&body, "printf(\" %%zu %%zu\", offsetof(%s, %s), sizeof(((%s *)0)->%s));\n", name, f.name, name, f.name)
		}
		body.WriteString("printf(\"\\n\");\n")
	}
	out, err := harness.RunHost(context.Background(), header, body.String())
	if errors.Is(err, harness.ErrNoCompiler) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	clangLayout := map[string][]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		fs := strings.Fields(line)
		var nums []int
		for _, f := range fs[1:] {
			var n int
			fmt.Sscan(f, &n)
			nums = append(nums, n)
		}
		clangLayout[fs[0]] = nums
	}
	for _, name := range names {
		c := clangLayout[name]
		v := reflect.ValueOf(mirrors[name])
		if v.Kind() != reflect.Struct {
			problems = append(problems, fmt.Sprintf("Go mirror of %s is a %s, not a struct", name, v.Kind()))
			continue
		}
		size := binary.Size(mirrors[name])
		if size < 0 {
			problems = append(problems, fmt.Sprintf("Go mirror %T of %s has fields encoding/binary cannot encode", mirrors[name], name))
			continue
		}
		if size != c[0] {
			problems = append(problems, fmt.Sprintf("%s: clang's size %d, Go mirror %T encodes %d bytes", name, c[0], mirrors[name], size))
		}
		cf := structs[name]
		if v.NumField() != len(cf) {
			problems = append(problems, fmt.Sprintf("%s: %d fields in C, %d in Go mirror %T", name, len(cf), v.NumField(), mirrors[name]))
			continue
		}
		off := 0
		for i := 0; i < v.NumField(); i++ {
			gf := v.Type().Field(i)
			gsize := binary.Size(reflect.New(gf.Type).Elem().Interface()) // blank fields are unexported
			if gf.Name != "_" && normName(gf.Name) != normName(cf[i].name) {
				problems = append(problems, fmt.Sprintf("%s field %d: C %s, Go %s", name, i, cf[i].name, gf.Name))
			}
			if c[1+2*i] != off || c[2+2*i] != gsize {
				problems = append(problems, fmt.Sprintf("%s.%s: clang offset %d size %d, Go offset %d size %d", name, cf[i].name, c[1+2*i], c[2+2*i], off, gsize))
			}
			off += gsize
		}
	}
	return problems
}

// TestArgLayouts: every argument struct's Go mirror encodes exactly as clang lays the C
// struct out (on Apple GPUs the layout rules of these fixed-size fields are the same).
func TestArgLayouts(t *testing.T) {
	// Each header once, as in Source: inlining three headers that share common.h repeats it.
	src, err := kernels.Header("args.h")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range layoutProblems(t, src, kernels.ArgStructs()) {
		t.Error(p)
	}
}

// TestArgLayoutsDetectMismatch: the layout check fails on a mirror that forgets C's padding,
// a renamed field, a missing mirror and a mirror without a struct.
func TestArgLayoutsDetectMismatch(t *testing.T) {
	type badArgs struct {
		A int32
		B uint64 // C puts b at 8
	}
	type renamedArgs struct {
		NE00 int32
		_    int32
		Bar  float32
	}
	header := `struct bad_args { int32_t a; uint64_t b; };
struct renamed_args { int32_t ne00; int32_t pad0; float foo; };
struct lonely_args { int32_t n; };
`
	got := layoutProblems(t, header, map[string]any{"bad_args": badArgs{}, "renamed_args": renamedArgs{}, "ghost_args": badArgs{}})
	for _, want := range []string{"bad_args: clang's size 16", "bad_args.b: clang offset 8", "renamed_args field 2: C foo, Go Bar", "struct lonely_args has no Go mirror", "ghost_args: no such struct"} {
		found := false
		for _, p := range got {
			found = found || strings.Contains(p, want)
		}
		if !found {
			t.Errorf("no problem reported containing %q; got %q", want, got)
		}
	}
}
