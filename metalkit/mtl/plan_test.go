package mtl

import (
	"errors"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/redlite/batch/metalkit/device"
)

func TestNoCopyLength(t *testing.T) {
	const page = 16384 // Apple Silicon's page
	t.Run("RoundsTheEndUpToThePage", func(t *testing.T) {
		for _, c := range []struct{ n, want int64 }{
			{1, page},
			{page - 1, page},
			{page, page},
			{page + 1, 2 * page},
			{5*page + 100, 6 * page},
		} {
			got, err := noCopyLength(7*page, c.n, page)
			if err != nil || got != c.want {
				t.Errorf("noCopyLength(%d bytes) = %d, %v; want %d", c.n, got, err, c.want)
			}
		}
	})
	t.Run("RejectsAnUnalignedStart", func(t *testing.T) {
		_, err := noCopyLength(7*page+4096, page, page)
		if err == nil || !strings.Contains(err.Error(), "not page-aligned") || !strings.Contains(err.Error(), "4096 bytes past a page") {
			t.Errorf("unaligned start: err = %v", err)
		}
	})
	t.Run("RejectsNothingAndBadPages", func(t *testing.T) {
		for _, c := range []struct {
			n, page int64
		}{{0, page}, {-1, page}, {10, 0}, {10, 12288}, {math.MaxInt64 - 10, page}} {
			if _, err := noCopyLength(0, c.n, c.page); err == nil {
				t.Errorf("noCopyLength(n=%d, page=%d) succeeded", c.n, c.page)
			}
		}
	})
}

func TestCheckRange(t *testing.T) {
	for _, c := range []struct {
		off, n, size int64
		ok           bool
	}{
		{0, 10, 10, true}, {10, 0, 10, true}, {4, 6, 10, true},
		{4, 7, 10, false}, {-1, 1, 10, false}, {0, -1, 10, false}, {11, 0, 10, false},
		{1, math.MaxInt64, 10, false},
	} {
		if err := checkRange(c.off, c.n, c.size); (err == nil) != c.ok {
			t.Errorf("checkRange(%d, %d, %d) = %v, want ok=%v", c.off, c.n, c.size, err, c.ok)
		}
	}
}

// MTLSize is three NSUInteger: 24 bytes, 8-aligned, fields in order. At 24 bytes and
// integer-only it is passed indirectly on arm64 (larger than 16 bytes, not a homogeneous
// float aggregate), as clang passes it.
func TestMTLSize(t *testing.T) {
	var s mtlSize
	if unsafe.Sizeof(s) != 24 || unsafe.Alignof(s) != 8 ||
		unsafe.Offsetof(s.Width) != 0 || unsafe.Offsetof(s.Height) != 8 || unsafe.Offsetof(s.Depth) != 16 {
		t.Fatalf("mtlSize layout: size %d align %d offsets %d %d %d", unsafe.Sizeof(s), unsafe.Alignof(s),
			unsafe.Offsetof(s.Width), unsafe.Offsetof(s.Height), unsafe.Offsetof(s.Depth))
	}
	if got, want := sizeOf([3]int{640, 2, 3}), (mtlSize{640, 2, 3}); got != want {
		t.Errorf("sizeOf = %+v, want %+v", got, want)
	}
	if got := encoding(typeOf[mtlSize]()); got != "{MTLSize=QQQ}" {
		t.Errorf("mtlSize encodes as %s", got)
	}
}

func TestConstantValue(t *testing.T) {
	for _, c := range []struct {
		value    any
		dataType uint
		bytes    []byte
	}{
		{true, dataTypeBool, []byte{1}},
		{false, dataTypeBool, []byte{0}},
		{int32(-2), dataTypeInt, []byte{0xfe, 0xff, 0xff, 0xff}},
		{uint32(258), dataTypeUInt, []byte{2, 1, 0, 0}},
		{float32(1), dataTypeFloat, []byte{0, 0, 0x80, 0x3f}},
	} {
		dt, b, err := constantValue(device.Constant{Index: 3, Value: c.value})
		if err != nil || dt != c.dataType || string(b) != string(c.bytes) {
			t.Errorf("constantValue(%T %v) = %d %x %v; want %d %x", c.value, c.value, dt, b, err, c.dataType, c.bytes)
		}
	}
	for _, bad := range []device.Constant{{Index: 0, Value: 3}, {Index: 0, Value: 1.5}, {Index: -1, Value: true}, {Index: 0, Value: nil}} {
		if _, _, err := constantValue(bad); err == nil {
			t.Errorf("constantValue(%+v) succeeded", bad)
		}
	}
}

func TestPipelineKey(t *testing.T) {
	a, err := pipelineKey("mul_mv_q4_K_f32", []device.Constant{{Index: 1, Value: int32(4)}, {Index: 0, Value: true}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pipelineKey("mul_mv_q4_K_f32", []device.Constant{{Index: 0, Value: true}, {Index: 1, Value: int32(4)}})
	if a != b {
		t.Errorf("the same constants in another order make another key: %q, %q", a, b)
	}
	for _, other := range [][]device.Constant{
		{{Index: 0, Value: false}, {Index: 1, Value: int32(4)}},
		{{Index: 0, Value: true}, {Index: 1, Value: uint32(4)}}, // same bits, other type
		{{Index: 0, Value: true}},
	} {
		if k, _ := pipelineKey("mul_mv_q4_K_f32", other); k == a {
			t.Errorf("constants %v share the key of another specialisation", other)
		}
	}
	if k, _ := pipelineKey("rms_norm_f32", nil); k != "rms_norm_f32" {
		t.Errorf("key without constants = %q", k)
	}
	if _, err := pipelineKey("k", []device.Constant{{Index: 2, Value: true}, {Index: 2, Value: false}}); err == nil {
		t.Error("a constant given twice is accepted")
	}
}

type fakeBuffer struct{ n int64 }

func (b fakeBuffer) Len() int64                { return b.n }
func (b fakeBuffer) Write(int64, []byte) error { return nil }
func (b fakeBuffer) Read(int64, []byte) error  { return nil }
func (b fakeBuffer) Release()                  {}

func TestCheckDispatch(t *testing.T) {
	good := device.Dispatch{
		Groups:  [3]int{64, 1, 1},
		Threads: [3]int{32, 4, 1},
		Buffers: []device.BufferArg{{Index: 1, Buffer: fakeBuffer{1024}, Offset: 512}},
		Bytes:   []device.BytesArg{{Index: 0, Data: make([]byte, 48)}},
		Shared:  []device.SharedArg{{Index: 0, Size: 100}},
	}
	if err := checkDispatch(good, 1024); err != nil {
		t.Fatalf("a good dispatch: %v", err)
	}
	for name, mutate := range map[string]func(d *device.Dispatch){
		"NoGroups":        func(d *device.Dispatch) { d.Groups[1] = 0 },
		"NoThreads":       func(d *device.Dispatch) { d.Threads[2] = 0 },
		"TooManyThreads":  func(d *device.Dispatch) { d.Threads = [3]int{64, 32, 1} },
		"HugeGrid":        func(d *device.Dispatch) { d.Groups[0] = math.MaxUint32 + 1 },
		"NilBuffer":       func(d *device.Dispatch) { d.Buffers[0].Buffer = nil },
		"OffsetPastEnd":   func(d *device.Dispatch) { d.Buffers[0].Offset = 1025 },
		"NegativeOffset":  func(d *device.Dispatch) { d.Buffers[0].Offset = -1 },
		"EmptyBytes":      func(d *device.Dispatch) { d.Bytes[0].Data = nil },
		"BytesOver4KiB":   func(d *device.Dispatch) { d.Bytes[0].Data = make([]byte, 4097) },
		"NegativeShared":  func(d *device.Dispatch) { d.Shared[0].Size = -16 },
		"NegativeBufferI": func(d *device.Dispatch) { d.Buffers[0].Index = -1 },
	} {
		t.Run(name, func(t *testing.T) {
			d := good
			d.Buffers = append([]device.BufferArg(nil), good.Buffers...)
			d.Bytes = append([]device.BytesArg(nil), good.Bytes...)
			d.Shared = append([]device.SharedArg(nil), good.Shared...)
			mutate(&d)
			if err := checkDispatch(d, 1024); err == nil {
				t.Errorf("accepted: %+v", d)
			}
		})
	}
}

func TestSharedLength(t *testing.T) {
	for n, want := range map[int]int{0: 0, 1: 16, 16: 16, 17: 32, 4100: 4112} {
		if got := sharedLength(n); got != want {
			t.Errorf("sharedLength(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestSplitAfter(t *testing.T) {
	want := []int{32, 64, 128, 256, 512, 512, 512}
	for k, w := range want {
		if got := splitAfter(k); got != w {
			t.Errorf("splitAfter(%d) = %d, want %d", k, got, w)
		}
	}
	// A decode step of ~1000 dispatches is cut into a handful of command buffers.
	for n, want := range map[int]int{1: 1, 32: 1, 33: 2, 992: 5, 1000: 6, 3000: 9} {
		buffers := 0
		for left := n; left > 0; buffers++ {
			left -= splitAfter(buffers)
		}
		if buffers != want {
			t.Errorf("%d dispatches make %d command buffers, want %d", n, buffers, want)
		}
	}
}

func TestCommandBufferError(t *testing.T) {
	t.Run("OutOfMemoryWrapsErrOutOfMemory", func(t *testing.T) {
		err := commandBufferError("command buffer 2 of 3 (dispatches 32 to 95)", 8, "MTLCommandBufferErrorDomain",
			"Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)")
		var derr *device.Error
		if !errors.As(error(err), &derr) || !errors.Is(err, device.ErrOutOfMemory) {
			t.Fatalf("got %v (%T); want a *device.Error wrapping ErrOutOfMemory", err, err)
		}
		for _, w := range []string{"command buffer 2 of 3", "Insufficient Memory", "MTLCommandBufferErrorOutOfMemory"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q does not say %q", err, w)
			}
		}
	})
	t.Run("OtherCodesAreNamed", func(t *testing.T) {
		for code, name := range map[int64]string{2: "MTLCommandBufferErrorTimeout", 3: "MTLCommandBufferErrorPageFault", 99: "code 99"} {
			err := commandBufferError("commit", code, "MTLCommandBufferErrorDomain", "boom")
			if errors.Is(err, device.ErrOutOfMemory) {
				t.Errorf("code %d reads as out of memory", code)
			}
			if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "boom") {
				t.Errorf("code %d: %q does not name %s", code, err, name)
			}
		}
	})
}
