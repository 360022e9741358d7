//go:build linux || darwin

package mtl

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"testing"

	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/harness"
)

// The test library of the Mac tests (mtl_darwin_test.go). Its kernels run on the harness
// device too, where AddressSanitizer sees a thread past the end of a buffer that a GPU lets
// pass silently.
const testSource = `
#include <metal_stdlib>
using namespace metal;

constant int ADD [[function_constant(0)]];

struct add_args {
	uint32_t n;
	float scale;
};

// x = x*scale + ADD, through threadgroup memory so that setThreadgroupMemoryLength is used.
kernel void add_const(constant add_args & args [[buffer(0)]],
                      device float * x [[buffer(1)]],
                      threadgroup float * tmp [[threadgroup(0)]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint gid [[thread_position_in_grid]]) {
	tmp[tid] = gid < args.n ? x[gid] : 0.0f;
	threadgroup_barrier(mem_flags::mem_threadgroup);
	if (gid < args.n) {
		x[gid] = tmp[tid] * args.scale + float(ADD);
	}
}

// dst = src for the first n elements: the grid is rounded up to whole threadgroups, and the
// threads past n must not touch either buffer.
kernel void copy_f32(constant uint & n [[buffer(0)]],
                     device const float * src [[buffer(1)]],
                     device float * dst [[buffer(2)]],
                     uint gid [[thread_position_in_grid]]) {
	if (gid >= n) {
		return;
	}
	dst[gid] = src[gid];
}

// 1 where x is infinite: fast math would let the compiler assume it never is.
kernel void is_inf(device float * x [[buffer(1)]], uint gid [[thread_position_in_grid]]) {
	x[gid] = isinf(x[gid]) ? 1.0f : 0.0f;
}
`

func floats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func floatBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// copyCase copies src (in buffer from) to a new buffer with copy_f32 over 1,024 threads (32
// threadgroups of 32) and checks the copy: the last 24 threads are past the end of both.
func copyCase(t *testing.T, d device.Device, from device.Buffer, src []float32) {
	t.Helper()
	n := len(src)
	dst, err := d.NewBuffer(int64(4 * n))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Release()
	p, err := d.Pipeline("copy_f32")
	if err != nil {
		t.Fatal(err)
	}
	cmd := d.NewCommands()
	cmd.Encode(device.Dispatch{
		Pipeline: p,
		Groups:   [3]int{(n + 31) / 32, 1, 1},
		Threads:  [3]int{32, 1, 1},
		Bytes:    []device.BytesArg{{Index: 0, Data: binary.LittleEndian.AppendUint32(nil, uint32(n))}},
		Buffers:  []device.BufferArg{{Index: 1, Buffer: from}, {Index: 2, Buffer: dst}},
	})
	cmd.Commit()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 4*n)
	if err := dst.Read(0, out); err != nil {
		t.Fatal(err)
	}
	for i, v := range floats(out) {
		if v != src[i] {
			t.Fatalf("copy[%d] = %g, want %g", i, v, src[i])
		}
	}
}

// TestWrapBuffer's dispatch (1,000 elements over 1,024 threads) on the harness device.
func TestCopyPastTheEndOnHarness(t *testing.T) {
	d, err := harness.New(testSource)
	if errors.Is(err, harness.ErrNoCompiler) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer d.(*harness.Device).Close()
	src := make([]float32, 1000)
	for i := range src {
		src[i] = float32(i) * 0.5
	}
	from, err := d.WrapBuffer(floatBytes(src))
	if err != nil {
		t.Fatal(err)
	}
	defer from.Release()
	copyCase(t, d, from, src)
}
