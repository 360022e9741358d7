// Package standin builds and loads a stand-in for the Objective-C runtime and Metal
// (csrc/standin.c): a small shared library exporting objc_msgSend, sel_registerName,
// objc_getClass, objc_autoreleasePoolPush/Pop and MTLCreateSystemDefaultDevice, compiled
// by the system C compiler when a test first asks for it and loaded with purego. The Metal
// device (package mtl) sends its messages to it through its real message layer, so that
// its host cost is measured, and its argument layout and autorelease pools tested, on
// Linux. Nothing runs on a GPU.
//
// Only tests import this package: it links purego, which package mtl links only on darwin.
package standin

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

//go:embed csrc/standin.c
var source []byte

// Lib is the loaded stand-in: the addresses of its functions and its counters.
type Lib struct {
	MsgSend, RegisterName, GetClass, CreateDevice, PoolPush, PoolPop uintptr

	count    func(name string) uint64
	reset    func()
	register func(name string) uintptr
	vars     map[string]uintptr
}

var (
	once   sync.Once
	loaded *Lib
	errLd  error
)

// Load builds the stand-in (once per process) and loads it. It fails where purego cannot
// load a C library (not linux or darwin on amd64 or arm64) or no C compiler is found.
func Load() (*Lib, error) {
	once.Do(func() { loaded, errLd = load() })
	return loaded, errLd
}

// Compiler is the C compiler: $CC, else cc, else clang-16.
func Compiler() (string, error) {
	for _, c := range []string{os.Getenv("CC"), "cc", "clang-16"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", errors.New("standin: no C compiler ($CC, cc or clang-16)")
}

func load() (*Lib, error) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		return nil, fmt.Errorf("standin: only on linux/amd64 and linux/arm64, this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	cc, err := Compiler()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redlite-standin-")
	if err != nil {
		return nil, err
	}
	// The library stays mapped for the life of the process; its file is not needed once
	// loaded.
	defer os.RemoveAll(dir)
	src, so := filepath.Join(dir, "standin.c"), filepath.Join(dir, "libstandin.so")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("standin: %s: %v\n%s", cc, err, out)
	}
	h, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("standin: %w", err)
	}
	l := &Lib{vars: map[string]uintptr{}}
	for name, p := range map[string]*uintptr{
		"objc_msgSend":                 &l.MsgSend,
		"sel_registerName":             &l.RegisterName,
		"objc_getClass":                &l.GetClass,
		"MTLCreateSystemDefaultDevice": &l.CreateDevice,
		"objc_autoreleasePoolPush":     &l.PoolPush,
		"objc_autoreleasePoolPop":      &l.PoolPop,
	} {
		if *p, err = purego.Dlsym(h, name); err != nil {
			return nil, fmt.Errorf("standin: %w", err)
		}
	}
	for _, v := range []string{"standin_messages", "standin_outside_pool", "standin_autoreleased", "standin_pool_errors", "standin_buffers", "standin_last", "standin_sizes", "standin_bytes", "standin_fail_library", "standin_apple_family", "standin_read_sizes", "standin_watch"} {
		if l.vars[v], err = purego.Dlsym(h, v); err != nil {
			return nil, fmt.Errorf("standin: %w", err)
		}
	}
	purego.RegisterLibFunc(&l.count, h, "standin_count")
	purego.RegisterLibFunc(&l.register, h, "sel_registerName")
	purego.RegisterLibFunc(&l.reset, h, "standin_reset")
	return l, nil
}

func (l *Lib) word(name string, i int) *uint64 {
	return (*uint64)(unsafe.Add(cmem(l.vars[name]), 8*i))
}

// Count is how many times the selector named name was sent since the last Reset.
func (l *Lib) Count(name string) uint64 { return l.count(name) }

// Reset zeroes the counters.
func (l *Lib) Reset() { l.reset() }

// Messages is how many messages were sent since Reset; OutsidePool how many of them on a
// thread without an autorelease pool; Autoreleased how many objects came back
// autoreleased; PoolErrors how many pools were popped out of order; Buffers how many
// buffers are alive.
func (l *Lib) Messages() uint64     { return *l.word("standin_messages", 0) }
func (l *Lib) OutsidePool() uint64  { return *l.word("standin_outside_pool", 0) }
func (l *Lib) Autoreleased() uint64 { return *l.word("standin_autoreleased", 0) }
func (l *Lib) PoolErrors() uint64   { return *l.word("standin_pool_errors", 0) }
func (l *Lib) Buffers() uint64      { return *l.word("standin_buffers", 0) }

// Watch makes Last record only the messages of the selector named name ("" for every
// message).
func (l *Lib) Watch(name string) {
	var s uintptr
	if name != "" {
		s = l.register(name)
	}
	*(*uintptr)(cmem(l.vars["standin_watch"])) = s
}

// Last is the last message's six words: receiver, selector, four arguments.
func (l *Lib) Last() [6]uint64 {
	var w [6]uint64
	for i := range w {
		w[i] = *l.word("standin_last", i)
	}
	return w
}

// Sizes are the two MTLSize the last dispatch passed, read through its pointers (with
// ReadSizes on).
func (l *Lib) Sizes() [6]uint64 {
	var w [6]uint64
	for i := range w {
		w[i] = *l.word("standin_sizes", i)
	}
	return w
}

// Bytes are the first 32 bytes the last setBytes passed, read through its pointer.
func (l *Lib) Bytes() [4]uint64 {
	var w [4]uint64
	for i := range w {
		w[i] = *l.word("standin_bytes", i)
	}
	return w
}

// ReadSizes makes dispatches read their MTLSize arguments through the pointers the arm64
// ABI passes (off, they are not read: a caller passing them another way is not followed).
func (l *Lib) ReadSizes(on bool) { l.setInt("standin_read_sizes", on) }

// FailLibrary makes newLibraryWithSource:options:error: fail, writing an NSError through
// its out-parameter.
func (l *Lib) FailLibrary(on bool) { l.setInt("standin_fail_library", on) }

// AppleFamily makes the device support the MTLGPUFamilyApple families up to f (1005: Apple5,
// as the virtual GPU of GitHub's macOS runners), and Metal3 from Apple7; 0 supports every family.
func (l *Lib) AppleFamily(f int) { *(*int32)(cmem(l.vars["standin_apple_family"])) = int32(f) }

func (l *Lib) setInt(name string, on bool) {
	v := int32(0)
	if on {
		v = 1
	}
	*(*int32)(cmem(l.vars[name])) = v
}

// cmem is the C library's memory at addr (outside Go's heap: the collector never moves or
// frees it).
func cmem(addr uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }
