package harness

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

// The strict check refuses what Apple's compiler refuses and the harness (C++20, address
// spaces as nothing, template overloads) lets through, and passes a correct kernel.
func TestCheckStrict(t *testing.T) {
	const head = "#include <metal_stdlib>\nusing namespace metal;\n#line 1 \"k.metal\"\n"
	good := `
static inline float first(device const float * p) { return p[0]; }
kernel void ok(device const float * x [[buffer(1)]], device float * y [[buffer(2)]],
               threadgroup float * t [[threadgroup(0)]], uint i [[thread_position_in_grid]],
               uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float s[32];
    s[tid % 32] = x[i];
    t[tid] = max(first(x), 0.0f) + s[0];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[i] = float4(t[tid]).x + min(int(i), 3);
}
`
	if err := CheckStrict(context.Background(), head+good); err != nil {
		if errors.Is(err, ErrNoCompiler) && os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatalf("a correct kernel: %v", err)
	}
	for _, tc := range []struct{ name, src, want string }{
		{"DevicePointerAsThread", `
static inline float first(const float * p) { return p[0]; }
kernel void k(device const float * x [[buffer(1)]], device float * y [[buffer(2)]]) { y[0] = first(x); }
`, "k.metal:2"},
		{"ThreadgroupAsDevice", `
static inline void put(device float * p, float v) { p[0] = v; }
kernel void k(threadgroup float * t [[threadgroup(0)]]) { put(t, 1.0f); }
`, "address space"},
		{"MaxFloatInt", `
kernel void k(device float * y [[buffer(1)]]) { y[0] = max(y[1], 0); }
`, "ambiguous"},
		{"MinUintInt", `
kernel void k(device uint * y [[buffer(1)]], uint i [[thread_position_in_grid]]) { y[i] = min(i, int(y[0])); }
`, "ambiguous"},
		{"StandardLibrary", `
kernel void k(device float * y [[buffer(1)]]) { y[0] = std::fabs(y[1]); }
`, "std"},
		{"CXX17", `
kernel void k(device float * y [[buffer(1)]]) { if constexpr (sizeof(float) == 4) { y[0] = 1.0f; } }
`, "C++17"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckStrict(context.Background(), head+tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}
