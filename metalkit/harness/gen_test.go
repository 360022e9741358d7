package harness

import (
	"strings"
	"testing"
)

func TestGenerateErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"NoAttribute", "kernel void k(device float * x) {}", "parameter \"device float * x\" has no attribute"},
		{"UnknownAttribute", "kernel void k(device float * x [[buffer(0)]], uint q [[quad_lane_id]]) {}", "[[quad_lane_id]] is not supported"},
		{"IndexTooLarge", "kernel void k(device float * x [[buffer(31)]]) {}", "index 31 is above 30"},
		{"Twice", "kernel void k(device float * x [[buffer(0)]]) {}\nkernel void k(device float * y [[buffer(0)]]) {}", "kernel k is defined twice"},
		{"HostNameOfNothing", "template [[host_name(\"k_f32\")]] kernel kt nothing<float>;", "not a template kernel"},
		{"TwoThreadgroupVars", "kernel void k(uint t [[thread_index_in_threadgroup]]) { threadgroup float a[4], b[4]; }", "one threadgroup variable per statement"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := generate(tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestGenerateKeepsLines: every rewrite keeps the line count, so clang's line numbers are
// the source's.
func TestGenerateKeepsLines(t *testing.T) {
	src := `constant int FC_N
	[[function_constant(3)]];
kernel void k(
		device float * x [[buffer(1)]],
		uint tid [[thread_position_in_grid]]) {
	threadgroup float
		sh[32];
	threadgroup float * p = sh; // a pointer: left alone
	x[tid] = 1.5h + sh[0] + p[1]; // "threadgroup float y[2];" in a comment is left alone
}
// end
`
	g, err := generate(src)
	if err != nil {
		t.Fatal(err)
	}
	lib := g.Code[:strings.Index(g.Code, "#line 1 \"harness-glue.cpp\"")]
	if got, want := strings.Count(lib, "\n"), strings.Count(src, "\n")+1; got != want {
		t.Errorf("%d lines after rewriting, want %d:\n%s", got, want, lib)
	}
	lines := strings.Split(lib, "\n")
	if !strings.Contains(lines[10], "// end") {
		t.Errorf("line 11 is %q, want the source's line 11", lines[10])
	}
	for _, want := range []string{"__msl_fc_register((3), &FC_N", "auto &sh = *__msl_tg<float [32]>", "threadgroup float * p = sh;", "1.5f16", "\"threadgroup float y[2];\""} {
		if !strings.Contains(lib, want) {
			t.Errorf("rewritten source lacks %q:\n%s", want, lib)
		}
	}
	if len(g.Kernels) != 1 || g.Kernels[0].Name != "k" || len(g.Kernels[0].Buffers) != 1 || g.Kernels[0].Buffers[0] != 1 {
		t.Errorf("kernels %+v, want k with buffer(1)", g.Kernels)
	}
}
