//go:build darwin

package mtl

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/redlite/batch/metalkit/device"
)

// These tests run only on a Mac, against the real GPU (scripts/mac-check and
// .github/workflows/macos.yml run them). Without a Metal device they skip, unless
// $REDLITE_REQUIRE_METAL is set, as those two set it: then they fail.

func testDevice(t *testing.T) *Device {
	t.Helper()
	return openDevice(t, testSource)
}

// openDevice compiles source on the Mac's GPU, skipping without one unless
// $REDLITE_REQUIRE_METAL is set.
func openDevice(t testing.TB, source string) *Device {
	t.Helper()
	d, err := New(source)
	if errors.Is(err, ErrUnavailable) && os.Getenv("REDLITE_REQUIRE_METAL") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d.(*Device)
}

// TestGPUSupported is the macOS workflow's probe (.github/workflows/macos.yml): it skips,
// saying why, where the GPU is not one the backend runs on (ErrUnsupportedGPU: GitHub's
// hosted runners' virtual GPU), so that the workflow reports the GPU tests as skipped
// rather than running them there; any other failure to open fails it.
func TestGPUSupported(t *testing.T) {
	d, err := New(testSource)
	if errors.Is(err, ErrUnsupportedGPU) {
		t.Skipf("GPU tests skipped: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
}

func TestDefaultFactsOnMac(t *testing.T) {
	f, err := DefaultFacts()
	if errors.Is(err, ErrUnavailable) && os.Getenv("REDLITE_REQUIRE_METAL") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if f.Name == "" || !f.UnifiedMemory || f.LimitMiB() < 1024 {
		t.Errorf("implausible device: %+v", f)
	}
	t.Logf("%s", f)
}

// Forty dispatches of one pass, each adding 1 to every element: they span two command
// buffers (splitAfter), and each must see the previous one's writes.
func TestDispatchesInOrderAcrossCommandBuffers(t *testing.T) {
	d := testDevice(t)
	const n, steps = 1000, 40
	p, err := d.Pipeline("add_const", device.Constant{Index: 0, Value: int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	if p.SIMDWidth() != 32 || p.MaxThreads() < 256 {
		t.Errorf("pipeline: SIMD width %d, max threads %d", p.SIMDWidth(), p.MaxThreads())
	}
	buf, err := d.NewBuffer(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i)
	}
	if err := buf.Write(0, floatBytes(x)); err != nil {
		t.Fatal(err)
	}
	args := make([]byte, 8)
	binary.LittleEndian.PutUint32(args[0:], n)
	binary.LittleEndian.PutUint32(args[4:], math.Float32bits(1))
	cmd := d.NewCommands()
	for range steps {
		cmd.Encode(device.Dispatch{
			Pipeline: p,
			Groups:   [3]int{(n + 255) / 256, 1, 1},
			Threads:  [3]int{256, 1, 1},
			Bytes:    []device.BytesArg{{Index: 0, Data: args}},
			Buffers:  []device.BufferArg{{Index: 1, Buffer: buf}},
			Shared:   []device.SharedArg{{Index: 0, Size: 256 * 4}},
		})
	}
	cmd.Commit()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 4*n)
	if err := buf.Read(0, out); err != nil {
		t.Fatal(err)
	}
	for i, v := range floats(out) {
		if v != float32(i+steps) {
			t.Fatalf("x[%d] = %g, want %d", i, v, i+steps)
		}
	}
}

func TestPipelineCache(t *testing.T) {
	d := testDevice(t)
	a, err := d.Pipeline("add_const", device.Constant{Index: 0, Value: int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := d.Pipeline("add_const", device.Constant{Index: 0, Value: int32(1)})
	c, err := d.Pipeline("add_const", device.Constant{Index: 0, Value: int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	if a != b || a == c {
		t.Errorf("cache: same constants give %p and %p, other constants %p", a, b, c)
	}
	if _, err := d.Pipeline("no_such_kernel"); err == nil {
		t.Error("a missing kernel makes a pipeline")
	}
	if _, err := d.Pipeline("add_const", device.Constant{Index: 0, Value: 1}); err == nil {
		t.Error("an int (not int32) constant is accepted")
	}
}

// A no-copy buffer over a page-aligned mapping whose length is not a whole number of
// pages, read by a kernel; a window off the page boundary is refused.
func TestWrapBuffer(t *testing.T) {
	d := testDevice(t)
	page := os.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	const n = 1000
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i) * 0.5
	}
	copy(mem, floatBytes(src))
	wrapped, err := d.WrapBuffer(mem[:4*n])
	if err != nil {
		t.Fatal(err)
	}
	defer wrapped.Release()
	if wrapped.Len() != 4*n {
		t.Errorf("wrapped buffer reports %d bytes, want %d", wrapped.Len(), 4*n)
	}
	if err := wrapped.Write(0, []byte{1}); err == nil {
		t.Error("a write to a wrapped buffer is accepted")
	}
	copyCase(t, d, wrapped, src)
	if _, err := d.WrapBuffer(mem[16:]); err == nil || !strings.Contains(err.Error(), "page-aligned") {
		t.Errorf("an unaligned window: err = %v", err)
	}
}

// Fast math is off: isinf sees an infinity.
func TestIEEEMath(t *testing.T) {
	d := testDevice(t)
	buf, err := d.NewBuffer(8)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	buf.Write(0, floatBytes([]float32{float32(math.Inf(-1)), 3}))
	p, err := d.Pipeline("is_inf")
	if err != nil {
		t.Fatal(err)
	}
	cmd := d.NewCommands()
	cmd.Encode(device.Dispatch{Pipeline: p, Groups: [3]int{1, 1, 1}, Threads: [3]int{2, 1, 1},
		Buffers: []device.BufferArg{{Index: 1, Buffer: buf}}})
	cmd.Commit()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 8)
	buf.Read(0, out)
	if got := floats(out); got[0] != 1 || got[1] != 0 {
		t.Errorf("isinf(-inf), isinf(3) = %v, want [1 0]", got)
	}
}

func TestErrors(t *testing.T) {
	d := testDevice(t)
	t.Run("CompileErrorNamesTheLine", func(t *testing.T) {
		_, err := New("kernel void broken(device float *x [[buffer(1)]]) { x[0] = y; }")
		if err == nil || !strings.Contains(err.Error(), "compile") || !strings.Contains(err.Error(), "y") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("BufferOverMaxLengthIsOutOfMemory", func(t *testing.T) {
		_, err := d.NewBuffer(d.MaxBufferLength() + 1)
		if !errors.Is(err, device.ErrOutOfMemory) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("BadDispatchNamesTheKernel", func(t *testing.T) {
		p, err := d.Pipeline("copy_f32")
		if err != nil {
			t.Fatal(err)
		}
		cmd := d.NewCommands()
		cmd.Encode(device.Dispatch{Pipeline: p, Groups: [3]int{1, 1, 1}, Threads: [3]int{p.MaxThreads() + 1, 1, 1}})
		cmd.Commit()
		var derr *device.Error
		if err := cmd.Wait(); !errors.As(err, &derr) || derr.Kernel != "copy_f32" {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("WaitBeforeCommit", func(t *testing.T) {
		if err := d.NewCommands().Wait(); err == nil {
			t.Error("Wait before Commit succeeds")
		}
	})
	t.Run("OutOfRange", func(t *testing.T) {
		b, err := d.NewBuffer(16)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Release()
		if err := b.Write(8, make([]byte, 9)); err == nil {
			t.Error("a write past the end is accepted")
		}
		if err := b.Read(-1, make([]byte, 1)); err == nil {
			t.Error("a read before the start is accepted")
		}
	})
}
