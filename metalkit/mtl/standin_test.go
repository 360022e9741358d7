package mtl

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/mtl/standin"
)

// The device's host side on the stand-in runtime (package standin): the words each message
// passes, the pointers it passes, and what the hot path allocates. The stand-in reads
// arguments as the arm64 ABI passes them; TestArgumentABI checks that ABI against clang.

func standinDevice(t *testing.T) (*Device, *standin.Lib) {
	t.Helper()
	lib, _ := StandIn(t)
	d, err := newDevice("kernel void k() {}")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, lib
}

func TestStandInDispatchArguments(t *testing.T) {
	d, lib := standinDevice(t)
	p, err := d.Pipeline("k")
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.NewBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	b, err := d.NewBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	lib.ReadSizes(true)
	defer lib.ReadSizes(false)
	lib.Watch("setBuffers:offsets:withRange:")
	defer lib.Watch("")

	cmd := d.NewCommands().(*commands)
	args := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9}
	cmd.Encode(device.Dispatch{
		Pipeline: p, Groups: [3]int{640, 2, 3}, Threads: [3]int{32, 4, 1},
		Buffers: []device.BufferArg{{Index: 1, Buffer: a, Offset: 16}, {Index: 2, Buffer: b, Offset: 256}, {Index: 3, Buffer: a}},
		Bytes:   []device.BytesArg{{Index: 0, Data: args}},
	})
	if got, want := lib.Sizes(), [6]uint64{640, 2, 3, 32, 4, 1}; got != want {
		t.Errorf("dispatchThreadgroups read sizes %v through its pointers, want %v", got, want)
	}
	if got := lib.Bytes(); got[0] != 0x0807060504030201 || got[1] != 9 {
		t.Errorf("setBytes read %#x", got)
	}
	if n := lib.Count("setBuffers:offsets:withRange:"); n != 1 {
		t.Fatalf("three buffers bound with %d setBuffers", n)
	}

	// A second dispatch moving only buffer 2: one setBuffer, whose words are the receiver,
	// the selector, the buffer, the offset and the index.
	cmd.Encode(device.Dispatch{
		Pipeline: p, Groups: [3]int{1, 1, 1}, Threads: [3]int{1, 1, 1},
		Buffers: []device.BufferArg{{Index: 1, Buffer: a, Offset: 16}, {Index: 2, Buffer: b, Offset: 512}, {Index: 3, Buffer: a}},
		Bytes:   []device.BytesArg{{Index: 0, Data: args}},
	})
	if n := lib.Count("setBuffer:offset:atIndex:"); n != 1 {
		t.Errorf("one buffer moved, %d setBuffer sent", n)
	}
	if n := lib.Count("setComputePipelineState:"); n != 1 {
		t.Errorf("one pipeline set %d times", n)
	}
	// Three buffers at 1..3 changed together: the arrays and the range.
	cmd.Encode(device.Dispatch{
		Pipeline: p, Groups: [3]int{1, 1, 1}, Threads: [3]int{1, 1, 1},
		Buffers: []device.BufferArg{{Index: 1, Buffer: b, Offset: 32}, {Index: 2, Buffer: a, Offset: 64}, {Index: 3, Buffer: b, Offset: 128}},
	})
	w := lib.Last()
	if w[0] != uint64(cmd.enc) || w[2] != uint64(uintptr(unsafe.Pointer(&cmd.bufs[1]))) || w[3] != uint64(uintptr(unsafe.Pointer(&cmd.offs[1]))) || w[4] != 1 || w[5] != 3 {
		t.Errorf("setBuffers words %#x: want the encoder, the selector, &bufs[1], &offs[1], location 1, length 3", w)
	}
	if cmd.offs[1] != 32 || cmd.offs[2] != 64 || cmd.offs[3] != 128 || cmd.bufs[2] != a.(*buffer).obj {
		t.Errorf("argument table %v %v", cmd.bufs[:4], cmd.offs[:4])
	}
	cmd.Commit()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// An out-parameter on the goroutine's stack would be lost if the stack moved between taking
// its address and the C call: the message layer makes pointer arguments escape to the heap.
// Each goroutine below starts the send at another stack depth, so that in some the call's
// own frames grow (and move) the stack.
func TestPointerArgumentSurvivesStackGrowth(t *testing.T) {
	d, lib := standinDevice(t)
	lib.FailLibrary(true)
	defer lib.FailLibrary(false)
	for depth := range 200 {
		done := make(chan id)
		go func() { done <- nserrAtDepth(d, depth) }()
		if e := <-done; e == 0 {
			t.Fatalf("at stack depth %d the NSError written through the out-parameter was lost", depth)
		}
	}
}

func nserrAtDepth(d *Device, depth int) id {
	var pad [8]uintptr
	if depth > 0 {
		r := nserrAtDepth(d, depth-1)
		pad[depth%8] = uintptr(r)
		return id(pad[depth%8])
	}
	var nserr id
	if lib := msgNewLibraryWithSource.send(d.dev, d.dev, 0, &nserr); lib != 0 {
		return 0
	}
	return nserr
}

// The hot path allocates nothing per dispatch: a step of 1,800 dispatches stays within a
// few allocations (the pass, its command buffers).
func TestEncodeAllocations(t *testing.T) {
	d, _ := standinDevice(t)
	p, err := d.Pipeline("k")
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.NewBuffer(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	ds := make([]device.Dispatch, 1800)
	for i := range ds {
		ds[i] = device.Dispatch{
			Pipeline: p, Groups: [3]int{i + 1, 1, 1}, Threads: [3]int{32, 1, 1},
			Buffers: []device.BufferArg{{Index: 1, Buffer: a, Offset: int64(16 * (i % 7))}, {Index: 2, Buffer: a, Offset: int64(16 * (i % 3))}},
			Bytes:   []device.BytesArg{{Index: 0, Data: []byte{byte(i), 0, 0, 0}}},
			Shared:  []device.SharedArg{{Index: 0, Size: 16 * (i % 2)}},
		}
	}
	allocs := testing.AllocsPerRun(5, func() {
		cmd := d.NewCommands()
		for _, x := range ds {
			cmd.Encode(x)
		}
		cmd.Commit()
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 20 {
		t.Errorf("a pass of %d dispatches allocates %.0f times", len(ds), allocs)
	}
}

// TestArgumentABI checks the words the message layer passes against clang's code for the
// arm64 Apple ABI (the ABI objc_msgSend is called with on a Mac), compiled here for that
// target: a function declared with Apple's argument types reads an MTLSize through a
// pointer in the next integer register (x2, x3 after self and _cmd), and an NSRange from two
// integer registers (x4, x5). The same check of x86-64 code fails: the test can tell.
func TestArgumentABI(t *testing.T) {
	clang, err := exec.LookPath("clang-16")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	src := `
typedef struct { unsigned long width, height, depth; } MTLSize;
typedef struct _NSRange { unsigned long location, length; } NSRange;
typedef struct objc_object *id;
typedef struct objc_selector *SEL;
unsigned long dispatch(id self, SEL cmd, MTLSize g, MTLSize t) {
	return g.width + 2 * g.height + 3 * g.depth + 5 * t.width + 7 * t.height + 11 * t.depth;
}
unsigned long buffers(id self, SEL cmd, const id *bufs, const unsigned long *offs, NSRange r) {
	return 3 * r.location + r.length;
}
`
	ir := func(target string) string {
		cmd := exec.Command(clang, "--target="+target, "-O1", "-S", "-emit-llvm", "-x", "c", "-o", "-", "-")
		cmd.Stdin = strings.NewReader(src)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("clang --target=%s: %v\n%s", target, err, out)
		}
		return string(out)
	}
	params := func(ir, fn string) []string {
		m := regexp.MustCompile(`define [^@]*@` + fn + `\(([^)]*)\)`).FindStringSubmatch(ir)
		if m == nil {
			t.Fatalf("no definition of %s in:\n%s", fn, ir)
		}
		return strings.Split(m[1], ", ")
	}
	// What msg_call.go passes: MTLSize as a pointer word; NSRange as two words.
	matches := func(ir string) error {
		d := params(ir, "dispatch")
		if len(d) != 4 || !strings.HasPrefix(d[2], "ptr ") || !strings.HasPrefix(d[3], "ptr ") || strings.Contains(d[2], "byval") {
			return errors.New("dispatch(id, SEL, MTLSize, MTLSize) takes " + strings.Join(d, ", "))
		}
		b := params(ir, "buffers")
		if len(b) != 5 || !strings.HasPrefix(b[4], "[2 x i64]") {
			return errors.New("buffers(id, SEL, const id *, const unsigned long *, NSRange) takes " + strings.Join(b, ", "))
		}
		return nil
	}
	if err := matches(ir("arm64-apple-macos13")); err != nil {
		t.Errorf("arm64 Apple ABI: %v", err)
	}
	if err := matches(ir("x86_64-linux-gnu")); err == nil {
		t.Error("the check passes x86-64 code, which passes MTLSize on the stack: it checks nothing")
	}
	if unsafe.Sizeof(mtlSize{}) != 24 || unsafe.Sizeof(nsRange{}) != 16 {
		t.Errorf("mtlSize is %d bytes, nsRange %d", unsafe.Sizeof(mtlSize{}), unsafe.Sizeof(nsRange{}))
	}
}

// What one Objective-C message costs the host through the message layer, on the stand-in:
// the Go side (words, purego's call into C) of setBuffer:offset:atIndex: and of
// dispatchThreadgroups:threadsPerThreadgroup: with its two MTLSize pointers.
//
//	go test -run XXX -bench Message -benchmem ./metalkit/mtl
func BenchmarkMessage(b *testing.B) {
	StandIn(b)
	d, err := newDevice("")
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	c := d.NewCommands().(*commands)
	b.Run("setBuffer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			msgSetBuffer.send(d.queue, d.dev, 256, 1)
		}
	})
	b.Run("dispatchThreadgroups", func(b *testing.B) {
		b.ReportAllocs()
		c.groups, c.threads = mtlSize{64, 1, 1}, mtlSize{256, 1, 1}
		for b.Loop() {
			msgDispatchThreadgroups.send(d.queue, &c.groups, &c.threads)
		}
	})
}

// Every message of a pass — the dispatches' setters included, not only those that return
// autoreleased objects — is sent inside an autorelease pool, pushed and popped in order on
// one thread; a pass that stops at an encoding error, or is abandoned, too.
func TestPassInsideAutoreleasePool(t *testing.T) {
	d, lib := standinDevice(t)
	p, err := d.Pipeline("k")
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.NewBuffer(1 << 12)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	good := device.Dispatch{
		Pipeline: p, Groups: [3]int{1, 1, 1}, Threads: [3]int{32, 1, 1},
		Buffers: []device.BufferArg{{Index: 1, Buffer: a}},
		Bytes:   []device.BytesArg{{Index: 0, Data: []byte{1, 2, 3, 4}}},
	}
	bad := good
	bad.Threads = [3]int{0, 1, 1}
	for name, tc := range map[string]struct {
		pass   []device.Dispatch
		commit bool
	}{
		"pass":                  {slicesRepeat(good, 100), true}, // more than one command buffer
		"pass stopped by error": {[]device.Dispatch{good, bad, good}, true},
		"pass abandoned":        {slicesRepeat(good, 40), false}, // Wait without Commit
	} {
		lib.Reset()
		// A goroutine of its own, as a pass may run on any.
		done := make(chan error)
		go func() {
			cmd := d.NewCommands()
			for _, x := range tc.pass {
				cmd.Encode(x)
			}
			if tc.commit {
				cmd.Commit()
			}
			done <- cmd.Wait()
		}()
		err := <-done
		if (err != nil) != (name != "pass") {
			t.Errorf("%s: Wait returned %v", name, err)
		}
		if lib.Messages() == 0 || lib.Autoreleased() == 0 {
			t.Fatalf("%s: %d messages, %d autoreleased objects: the stand-in saw nothing", name, lib.Messages(), lib.Autoreleased())
		}
		if n := lib.OutsidePool(); n != 0 {
			t.Errorf("%s: %d of %d messages sent outside an autorelease pool", name, n, lib.Messages())
		}
		if n := lib.PoolErrors(); n != 0 {
			t.Errorf("%s: %d pools popped out of order", name, n)
		}
	}
}

func slicesRepeat(d device.Dispatch, n int) []device.Dispatch {
	out := make([]device.Dispatch, n)
	for i := range out {
		out[i] = d
	}
	return out
}

// A GPU below the Apple7 family or without Metal 3 (the virtual GPU of GitHub's hosted
// macOS runners is Apple5) is refused when the device opens, by name, as unavailable.
func TestOpenRefusesGPUBelowApple7(t *testing.T) {
	lib, _ := StandIn(t)
	for _, tc := range []struct {
		family int
		ok     bool
	}{{1005, false}, {1006, false}, {1007, true}, {1009, true}} {
		lib.AppleFamily(tc.family)
		d, err := newDevice("kernel void k() {}")
		if d != nil {
			d.Close()
		}
		if tc.ok != (err == nil) {
			t.Errorf("Apple family %d: open returned %v", tc.family, err)
		}
		if !tc.ok && (!errors.Is(err, ErrUnsupportedGPU) || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "Apple7")) {
			t.Errorf("Apple family %d: %v, want ErrUnsupportedGPU (and ErrUnavailable) naming Apple7", tc.family, err)
		}
	}
	lib.AppleFamily(0)
}
