package harness

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlite/batch/metalkit/device"
)

var shared struct {
	sync.Once
	d   *Device
	err error
}

// selftest is a device over the library and the self-test kernels, shared by the tests
// that leave it alive.
func selftest(t *testing.T) *Device {
	t.Helper()
	shared.Do(func() { shared.d, shared.err = newSelftest() })
	if errors.Is(shared.err, ErrNoCompiler) && os.Getenv("CI") == "" {
		t.Skip(shared.err)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.d
}

// newSelftest builds the self-test kernels alone: with kernels.Source() beside them every
// change to a kernel would rebuild them (a minute of clang); the library itself is built by
// the kernels package's and the backend's tests.
func newSelftest() (*Device, error) {
	src, err := os.ReadFile("testdata/selftest.metal")
	if err != nil {
		return nil, err
	}
	return newDevice("#line 1 \"selftest.metal\"\n"+string(src), Options{})
}

// fresh is a device of its own, for tests that kill it.
func fresh(t *testing.T) *Device {
	t.Helper()
	selftest(t) // skips without a compiler; the build is cached afterwards
	d, err := newSelftest()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func upload(t *testing.T, d device.Device, v []float32) device.Buffer {
	t.Helper()
	b, err := d.WrapBuffer(f32bytes(v))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Release)
	return b
}

func alloc(t *testing.T, d device.Device, n int) device.Buffer {
	t.Helper()
	b, err := d.NewBuffer(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Release)
	return b
}

func download(t *testing.T, b device.Buffer) []float32 {
	t.Helper()
	raw := make([]byte, b.Len())
	if err := b.Read(0, raw); err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(raw)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return v
}

type stArgs struct {
	N     int32
	Scale float32
}

func argBytes(a any) []byte {
	var b strings.Builder
	binary.Write(&b, binary.LittleEndian, a)
	return []byte(b.String())
}

// run encodes one dispatch and waits.
func run(t *testing.T, d device.Device, name string, consts []device.Constant, groups, threads [3]int, args any, bufs []device.Buffer, shared ...device.SharedArg) error {
	t.Helper()
	p, err := d.Pipeline(name, consts...)
	if err != nil {
		t.Fatal(err)
	}
	dd := device.Dispatch{Pipeline: p, Groups: groups, Threads: threads, Shared: shared}
	if args != nil {
		dd.Bytes = []device.BytesArg{{Index: 0, Data: argBytes(args)}}
	}
	for i, b := range bufs {
		dd.Buffers = append(dd.Buffers, device.BufferArg{Index: i + 1, Buffer: b})
	}
	c := d.NewCommands()
	c.Encode(dd)
	c.Commit()
	return c.Wait()
}

func mustRun(t *testing.T, d device.Device, name string, consts []device.Constant, groups, threads [3]int, args any, bufs []device.Buffer, shared ...device.SharedArg) {
	t.Helper()
	if err := run(t, d, name, consts, groups, threads, args, bufs, shared...); err != nil {
		t.Fatal(err)
	}
}

func near(a, b float32) bool { return math.Abs(float64(a-b)) <= 1e-5*math.Max(1, math.Abs(float64(b))) }

func TestAdd(t *testing.T) {
	d := selftest(t)
	n := 1000
	a, b := make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], b[i] = float32(i), float32(2*i)+0.5
	}
	ba, bb, bc := upload(t, d, a), upload(t, d, b), alloc(t, d, 4*n)
	// 4 groups of 256 threads: the last 24 threads are past n and must return.
	mustRun(t, d, "st_add", nil, [3]int{4, 1, 1}, [3]int{256, 1, 1}, stArgs{N: int32(n), Scale: 2}, []device.Buffer{ba, bb, bc})
	for i, got := range download(t, bc) {
		if want := (a[i] + b[i]) * 2; got != want {
			t.Fatalf("c[%d] = %v, want %v", i, got, want)
		}
	}
}

// TestSIMD checks every SIMD-group function against Metal's semantics, over a threadgroup
// of 40 threads: one full SIMD group and one of 8 lanes.
func TestSIMD(t *testing.T) {
	d := selftest(t)
	const n = 40
	x := make([]float32, n)
	for i := range x {
		x[i] = float32((i*7)%13) - 3
	}
	bx, out := upload(t, d, x), alloc(t, d, 4*12*n)
	mustRun(t, d, "st_simd", nil, [3]int{1, 1, 1}, [3]int{n, 1, 1}, nil, []device.Buffer{bx, out})
	got := download(t, out)
	for tid := 0; tid < n; tid++ {
		base := tid / 32 * 32
		lanes := min(32, n-base)
		lane := tid - base
		val := func(l int) float32 { // lane l of this group, 0 when it does not exist
			if l < 0 || l >= lanes {
				return 0
			}
			return x[base+l]
		}
		var sum, incl, excl float32
		mx, mn := float32(math.Inf(-1)), float32(math.Inf(1))
		for l := 0; l < lanes; l++ {
			sum += val(l)
			mx, mn = max(mx, val(l)), min(mn, val(l))
			if l < lane {
				excl += val(l)
			}
			if l <= lane {
				incl += val(l)
			}
		}
		down := val(lane)
		if lane+4 < 32 {
			down = val(lane + 4)
		}
		up := val(lane)
		if lane >= 1 {
			up = val(lane - 1)
		}
		want := []float32{sum, mx, mn, incl, excl, val((lane + 3) % 32), down, val(lane ^ 1), val(2), up, val(0), 0}
		names := []string{"sum", "max", "min", "prefix_inclusive_sum", "prefix_exclusive_sum", "shuffle", "shuffle_down", "shuffle_xor", "broadcast", "shuffle_up", "broadcast_first", "any"}
		for j, w := range want {
			if g := got[tid*12+j]; !near(g, w) {
				t.Errorf("thread %d simd_%s = %v, want %v", tid, names[j], g, w)
			}
		}
	}
}

// TestThreadgroupMemory sums each threadgroup's inputs through a [[threadgroup(0)]] buffer
// and a kernel-scope threadgroup array, across barriers, on several OS threads.
func TestThreadgroupMemory(t *testing.T) {
	d := selftest(t)
	const n, tg = 3000, 256
	groups := (n + tg - 1) / tg
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i%17) * 0.25
	}
	bx, out := upload(t, d, x), alloc(t, d, 4*groups)
	mustRun(t, d, "st_reduce", nil, [3]int{groups, 1, 1}, [3]int{tg, 1, 1}, stArgs{N: n}, []device.Buffer{bx, out}, device.SharedArg{Index: 0, Size: 4 * tg})
	got := download(t, out)
	for g := 0; g < groups; g++ {
		var want float32
		for i := g * tg; i < min(n, (g+1)*tg); i++ {
			want += x[i]
		}
		if !near(got[g], want) {
			t.Errorf("group %d sum = %v, want %v", g, got[g], want)
		}
	}
}

func TestFunctionConstants(t *testing.T) {
	d := selftest(t)
	out := alloc(t, d, 16)
	mustRun(t, d, "st_consts", []device.Constant{{Index: 0, Value: int32(21)}, {Index: 1, Value: true}, {Index: 2, Value: float32(0.5)}}, [3]int{1, 1, 1}, [3]int{32, 1, 1}, nil, []device.Buffer{out})
	if got, want := download(t, out), []float32{42, 1, 1, 0.5}; !slices.Equal(got, want) {
		t.Errorf("with constants: %v, want %v", got, want)
	}
	// A second pipeline of the same kernel, FC_FLAG and FC_BIAS undefined.
	mustRun(t, d, "st_consts", []device.Constant{{Index: 0, Value: int32(-3)}}, [3]int{1, 1, 1}, [3]int{32, 1, 1}, nil, []device.Buffer{out})
	if got, want := download(t, out), []float32{-6, 0, 0, -1}; !slices.Equal(got, want) {
		t.Errorf("with FC_FLAG undefined: %v, want %v", got, want)
	}
}

func TestHalf(t *testing.T) {
	d := selftest(t)
	// 1 + 2^-11 is halfway between two halves: rounds to even (1); 1 + 3·2^-11 rounds up.
	x := []float32{1 + 1.0/2048, 1 + 3.0/2048, 65504, 70000, 1e-8, -2.5}
	want := []float32{1, 1 + 2.0/1024, 65504, float32(math.Inf(1)), 0, -2.5}
	bx, out, hout := upload(t, d, x), alloc(t, d, 4*len(x)), alloc(t, d, 2*len(x))
	mustRun(t, d, "st_half", nil, [3]int{1, 1, 1}, [3]int{len(x), 1, 1}, nil, []device.Buffer{bx, out, hout})
	if got := download(t, out); !slices.Equal(got, want) {
		t.Errorf("float(half(x)) = %v, want %v", got, want)
	}
	raw := make([]byte, 2*len(x))
	if err := hout.Read(0, raw); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint16(raw[10:]); got != 0xbe00 { // -2.5 + 1 = -1.5
		t.Errorf("half(-2.5) + 1.0h = %#04x, want 0xbe00 (-1.5)", got)
	}
}

func TestHalfRoundsEachOperation(t *testing.T) {
	d := selftest(t)
	// 1000 + 0.3 = 1000.5 in half (0.3 is lost to the 0.5 spacing), - 1000 = 0.5; float
	// intermediates would give 0.3.
	x, err := d.WrapBuffer([]byte{0xd0, 0x63, 0xcd, 0x34, 0xd0, 0xe3}) // half 1000, 0.3, -1000
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	out := alloc(t, d, 4)
	mustRun(t, d, "st_half_ops", nil, [3]int{1, 1, 1}, [3]int{1, 1, 1}, nil, []device.Buffer{x, out})
	if got := download(t, out)[0]; got != 0.5 {
		t.Errorf("1000h + 0.3h - 1000h = %v, want 0.5", got)
	}
}

// TestMissingBarrierShows: a kernel that reads another thread's threadgroup value without a
// barrier gets an unwritten value (NaN) in some threadgroup.
func TestMissingBarrierShows(t *testing.T) {
	d := selftest(t)
	out := alloc(t, d, 4*64*2)
	mustRun(t, d, "st_race", nil, [3]int{2, 1, 1}, [3]int{64, 1, 1}, nil, []device.Buffer{out})
	nans := 0
	for _, v := range download(t, out) {
		if v != v {
			nans++
		}
	}
	if nans == 0 {
		t.Error("every thread read its neighbour's value although no barrier separated the write and the read")
	}
}

func TestVectors(t *testing.T) {
	d := selftest(t)
	x := []float32{1, 2, 3, 4, 5, -6, 7, 8}
	bx, out := upload(t, d, x), alloc(t, d, 4*4*4*2)
	mustRun(t, d, "st_vec", nil, [3]int{1, 1, 1}, [3]int{2, 1, 1}, nil, []device.Buffer{bx, out})
	got := download(t, out)
	for tid := 0; tid < 2; tid++ {
		v := x[tid*4 : tid*4+4]
		sel := float32(0)
		if v[0] < v[1] {
			sel = 1
		}
		want := []float32{
			v[2], v[3], v[0], v[1],
			v[3] + 1, v[2] + 1, v[1] + 1, 8,
			2, v[1] * 10, v[2] * 10, 2,
			v[0]*v[0] + v[1]*v[1] + v[2]*v[2] + v[3]*v[3], v[0] + v[1], max(v[0], v[3]), sel,
		}
		if g := got[tid*16 : tid*16+16]; !slices.Equal(g, want) {
			t.Errorf("thread %d: %v, want %v", tid, g, want)
		}
	}
}

func TestTemplateKernels(t *testing.T) {
	d := selftest(t)
	x := []float32{1, -2, 3.5}
	bx, out := upload(t, d, x), alloc(t, d, 12)
	mustRun(t, d, "st_scale_f32", nil, [3]int{1, 1, 1}, [3]int{3, 1, 1}, nil, []device.Buffer{bx, out})
	if got, want := download(t, out), []float32{3, -6, 10.5}; !slices.Equal(got, want) {
		t.Errorf("st_scale_f32: %v, want %v", got, want)
	}
	hx, err := d.WrapBuffer([]byte{0x00, 0x3c, 0x00, 0xc0}) // half 1, -2
	if err != nil {
		t.Fatal(err)
	}
	defer hx.Release()
	hy := alloc(t, d, 4)
	mustRun(t, d, "st_scale_f16", nil, [3]int{1, 1, 1}, [3]int{2, 1, 1}, nil, []device.Buffer{hx, hy})
	raw := make([]byte, 4)
	hy.Read(0, raw)
	if got := [2]uint16{binary.LittleEndian.Uint16(raw), binary.LittleEndian.Uint16(raw[2:])}; got != [2]uint16{0x4200, 0xc600} {
		t.Errorf("st_scale_f16: %#04x, want [0x4200 0xc600] (3, -6)", got)
	}
}

// TestOutOfBounds: a write one element past a buffer is an error naming the kernel, the
// device is dead afterwards, and the test process lives on.
func TestOutOfBounds(t *testing.T) {
	d := fresh(t)
	out := alloc(t, d, 4*64)
	err := run(t, d, "st_oob", nil, [3]int{1, 1, 1}, [3]int{64, 1, 1}, stArgs{N: 64}, []device.Buffer{out})
	var de *device.Error
	if !errors.As(err, &de) {
		t.Fatalf("got %v, want a *device.Error", err)
	}
	if de.Kernel != "st_oob" {
		t.Errorf("error names kernel %q, want st_oob: %v", de.Kernel, err)
	}
	if !strings.Contains(err.Error(), "heap-buffer-overflow") {
		t.Errorf("error lacks AddressSanitizer's report: %v", err)
	}
	if _, err := d.NewBuffer(16); err == nil {
		t.Error("the device still works after its process died")
	}
}

// TestHang: a kernel that never finishes is aborted after Timeout with an error naming it.
func TestHang(t *testing.T) {
	d := fresh(t)
	defer func(old time.Duration) { Timeout = old }(Timeout)
	Timeout = time.Second
	flag := alloc(t, d, 4)
	err := run(t, d, "st_hang", nil, [3]int{1, 1, 1}, [3]int{1, 1, 1}, nil, []device.Buffer{flag})
	var de *device.Error
	if !errors.As(err, &de) || de.Kernel != "st_hang" {
		t.Fatalf("got %v, want a *device.Error naming st_hang", err)
	}
	t.Log(err)
}

// TestRegionFence: a kernel writing past its region into the rest of the same buffer (the
// next tensor of a scratch buffer) is caught, though it stays inside the allocation.
func TestRegionFence(t *testing.T) {
	d := fresh(t)
	const n = 64
	a := upload(t, d, make([]float32, n))
	scratch := alloc(t, d, 4*3*n) // [pad | c | next tensor]
	p, err := d.Pipeline("st_add")
	if err != nil {
		t.Fatal(err)
	}
	dispatch := func(cLen int64) error {
		c := d.NewCommands()
		c.Encode(device.Dispatch{Pipeline: p, Groups: [3]int{1, 1, 1}, Threads: [3]int{n, 1, 1},
			Bytes: []device.BytesArg{{Index: 0, Data: argBytes(stArgs{N: n, Scale: 1})}},
			Buffers: []device.BufferArg{{Index: 1, Buffer: a, Length: 4 * n}, {Index: 2, Buffer: a, Length: 4 * n},
				{Index: 3, Buffer: scratch, Offset: 4 * n, Length: cLen}}})
		c.Commit()
		return c.Wait()
	}
	if err := dispatch(4 * n); err != nil {
		t.Fatalf("within its region: %v", err)
	}
	err = dispatch(4 * (n - 1))
	if err == nil || !strings.Contains(err.Error(), "use-after-poison") || !strings.Contains(err.Error(), "st_add") {
		t.Fatalf("got %v, want a use-after-poison report naming st_add", err)
	}
}

// TestRecoverableErrors: errors a kernel makes that leave the device usable.
func TestRecoverableErrors(t *testing.T) {
	d := selftest(t)
	out := alloc(t, d, 4*32)
	err := run(t, d, "st_diverge", nil, [3]int{1, 1, 1}, [3]int{32, 1, 1}, nil, []device.Buffer{out})
	if err == nil || !strings.Contains(err.Error(), "diverged") || !strings.Contains(err.Error(), "st_diverge") {
		t.Fatalf("got %v, want a divergence error naming st_diverge", err)
	}
	err = run(t, d, "st_early_return", nil, [3]int{1, 1, 1}, [3]int{64, 1, 1}, nil, []device.Buffer{out})
	if err == nil || !strings.Contains(err.Error(), "returned without reaching") {
		t.Fatalf("got %v, want an error about threads that returned before a barrier", err)
	}
	err = run(t, d, "st_too_much_shared", nil, [3]int{1, 1, 1}, [3]int{32, 1, 1}, nil, []device.Buffer{out})
	if err == nil || !strings.Contains(err.Error(), "32768") {
		t.Fatalf("got %v, want an error about threadgroup memory above 32 KiB", err)
	}
	// The kernel's own threadgroup variables count whether or not a thread reaches them, as
	// on a GPU: 32 KiB declared, 16 bytes set.
	ps, err := d.Pipeline("st_static_unreached")
	if err != nil {
		t.Fatal(err)
	}
	if got := ps.StaticShared(); got != 32<<10 {
		t.Errorf("st_static_unreached declares %d bytes of threadgroup memory, want %d", got, 32<<10)
	}
	err = run(t, d, "st_static_unreached", nil, [3]int{1, 1, 1}, [3]int{32, 1, 1}, nil, []device.Buffer{out}, device.SharedArg{Index: 0, Size: 16})
	if err == nil || !strings.Contains(err.Error(), "32784 bytes of threadgroup memory (32768 declared by the kernel, 16 set)") {
		t.Fatalf("got %v, want an error counting the kernel's 32 KiB and the 16 bytes set", err)
	}
	// A buffer bound at an offset that is not a multiple of its element type's size.
	in := upload(t, d, make([]float32, 64))
	p, err := d.Pipeline("st_scale_f32")
	if err != nil {
		t.Fatal(err)
	}
	c := d.NewCommands()
	c.Encode(device.Dispatch{Pipeline: p, Groups: [3]int{1, 1, 1}, Threads: [3]int{32, 1, 1},
		Buffers: []device.BufferArg{{Index: 1, Buffer: in, Offset: 2}, {Index: 2, Buffer: out}}})
	c.Commit()
	if err := c.Wait(); err == nil || !strings.Contains(err.Error(), "not aligned") {
		t.Fatalf("got %v, want an error about an unaligned binding", err)
	}
	// The device survives all of these.
	mustRun(t, d, "st_scale_f32", nil, [3]int{1, 1, 1}, [3]int{32, 1, 1}, nil, []device.Buffer{out, out})
}

func TestOptions(t *testing.T) {
	selftest(t)
	src, err := os.ReadFile("testdata/selftest.metal")
	if err != nil {
		t.Fatal(err)
	}
	dev, err := NewWithOptions(string(src), Options{MaxBufferLength: 1 << 20, MemoryLimit: 3 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if got := dev.MaxBufferLength(); got != 1<<20 {
		t.Errorf("MaxBufferLength = %d, want %d", got, 1<<20)
	}
	if _, err := dev.NewBuffer(1<<20 + 1); err == nil {
		t.Error("a buffer above MaxBufferLength was made")
	}
	var held []device.Buffer
	for i := 0; i < 3; i++ {
		b, err := dev.NewBuffer(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, b)
	}
	if _, err := dev.NewBuffer(16); !errors.Is(err, device.ErrOutOfMemory) {
		t.Errorf("beyond the memory limit: %v, want device.ErrOutOfMemory", err)
	}
	held[0].Release()
	if b, err := dev.NewBuffer(16); err != nil {
		t.Errorf("after a release: %v", err)
	} else {
		b.Release()
	}
}

// Metal's min and max on floats are fmin and fmax (a NaN argument gives the other): a
// kernel taking a maximum over scores with a NaN among them sees what it would on a GPU.
func TestMinMaxNaN(t *testing.T) {
	d := selftest(t)
	out := alloc(t, d, 4*11)
	mustRun(t, d, "st_nan_minmax", nil, [3]int{1, 1, 1}, [3]int{1, 1, 1}, nil, []device.Buffer{out})
	nan := float32(math.NaN())
	want := []float32{1, 1, 1, 1, 2, 2, 4, 3, nan, 0, 5}
	for i, got := range download(t, out) {
		if got != want[i] && !(math.IsNaN(float64(got)) && math.IsNaN(float64(want[i]))) {
			t.Errorf("out[%d] = %v, want %v", i, got, want[i])
		}
	}
}

// The library check names the kernel that declares more than 32 KiB, and not the one that
// declares exactly 32 KiB.
func TestCheckThreadgroupMemory(t *testing.T) {
	err := selftest(t).CheckThreadgroupMemory()
	if err == nil || !strings.Contains(err.Error(), "st_too_much_shared declares 32784 bytes") || strings.Contains(err.Error(), "st_static_unreached") {
		t.Fatalf("got %v, want an error naming st_too_much_shared (32784 bytes) alone", err)
	}
}

func TestCompileError(t *testing.T) {
	selftest(t)
	_, err := New("#line 1 \"broken.metal\"\nkernel void broken(device float * x [[buffer(0)]]) { x[0] = undefined_name; }\n")
	if err == nil || !strings.Contains(err.Error(), "broken.metal:1") || !strings.Contains(err.Error(), "undefined_name") {
		t.Fatalf("got %v, want clang's message naming broken.metal:1 and undefined_name", err)
	}
}

func TestValidation(t *testing.T) {
	d := selftest(t)
	p, err := d.Pipeline("st_add")
	if err != nil {
		t.Fatal(err)
	}
	out := alloc(t, d, 16)
	for _, tc := range []struct {
		name string
		dd   device.Dispatch
		want string
	}{
		{"MissingBuffer", device.Dispatch{Pipeline: p, Groups: [3]int{1, 1, 1}, Threads: [3]int{1, 1, 1}, Buffers: []device.BufferArg{{Index: 1, Buffer: out}}}, "not bound"},
		{"TooManyThreads", device.Dispatch{Pipeline: p, Groups: [3]int{1, 1, 1}, Threads: [3]int{1025, 1, 1}}, "threads per threadgroup"},
		{"ZeroGroups", device.Dispatch{Pipeline: p, Groups: [3]int{0, 1, 1}, Threads: [3]int{1, 1, 1}}, "positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := d.NewCommands()
			c.Encode(tc.dd)
			c.Commit()
			if err := c.Wait(); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "st_add") {
				t.Errorf("got %v, want an error naming st_add and %q", err, tc.want)
			}
		})
	}
	if _, err := d.Pipeline("no_such_kernel"); err == nil {
		t.Error("Pipeline of an unknown kernel succeeded")
	}
}

func TestSimdgroupMatrix(t *testing.T) {
	d := selftest(t)
	a, bt := make([]float32, 16*8), make([]float32, 16*8)
	for i := range a {
		a[i] = float32(i%5) - 2 // exact in half
		bt[i] = float32(i%7) * 0.5
	}
	ba, bb, bc := upload(t, d, a), upload(t, d, bt), alloc(t, d, 4*16*16)
	mustRun(t, d, "st_simdgroup_matrix", nil, [3]int{1, 1, 1}, [3]int{32, 1, 1}, nil, []device.Buffer{ba, bb, bc})
	got := download(t, bc)
	for i := 0; i < 16; i++ {
		for j := 0; j < 16; j++ {
			want := float32(1)
			for k := 0; k < 8; k++ {
				want += a[i*8+k] * bt[j*8+k]
			}
			if g := got[i*16+j]; g != want {
				t.Fatalf("c[%d][%d] = %v, want %v", i, j, g, want)
			}
		}
	}
}

// BenchmarkReduce: threadgroups of 256 threads with two barriers and a simd_sum each; the
// cost is mostly fiber switches (reported per thread).
func BenchmarkReduce(b *testing.B) {
	d, err := newSelftest()
	if err != nil {
		b.Skip(err)
	}
	defer d.Close()
	const n, tg = 1 << 18, 256
	x := make([]float32, n)
	bx, _ := d.WrapBuffer(f32bytes(x))
	out, _ := d.NewBuffer(4 * n / tg)
	p, _ := d.Pipeline("st_reduce")
	dd := device.Dispatch{Pipeline: p, Groups: [3]int{n / tg, 1, 1}, Threads: [3]int{tg, 1, 1},
		Bytes:   []device.BytesArg{{Index: 0, Data: argBytes(stArgs{N: n})}},
		Buffers: []device.BufferArg{{Index: 1, Buffer: bx}, {Index: 2, Buffer: out}},
		Shared:  []device.SharedArg{{Index: 0, Size: 4 * tg}}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := d.NewCommands()
		c.Encode(dd)
		c.Commit()
		if err := c.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/thread")
}

// BenchmarkDispatch: the fixed cost of a small dispatch (one threadgroup of 32 threads), in
// lists of 100 as a forward pass encodes them.
func BenchmarkDispatch(b *testing.B) {
	d, err := newSelftest()
	if err != nil {
		b.Skip(err)
	}
	defer d.Close()
	x, _ := d.NewBuffer(4 * 32)
	p, _ := d.Pipeline("st_add")
	dd := device.Dispatch{Pipeline: p, Groups: [3]int{1, 1, 1}, Threads: [3]int{32, 1, 1},
		Bytes:   []device.BytesArg{{Index: 0, Data: argBytes(stArgs{N: 32, Scale: 1})}},
		Buffers: []device.BufferArg{{Index: 1, Buffer: x}, {Index: 2, Buffer: x}, {Index: 3, Buffer: x}}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := d.NewCommands()
		for j := 0; j < 100; j++ {
			c.Encode(dd)
		}
		c.Commit()
		if err := c.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/dispatch")
}
