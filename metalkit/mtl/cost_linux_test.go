package mtl

import (
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// What one Objective-C message costs the host, approximated on Linux: a Metal dispatch is
// about seven objc_msgSend calls through purego's typed functions (pipeline, buffers,
// bytes, threadgroup memory, dispatchThreadgroups with two MTLSize), and purego's cost is
// in the Go side of the call, which is the same here. libc's memchr stands in for
// objc_msgSend; it ignores the extra arguments.
//
//	go test -run XXX -bench MessageCost ./metalkit/mtl

func libc(b *testing.B) uintptr {
	lib, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW)
	if err != nil {
		b.Skip(err)
	}
	return lib
}

// setBuffer:offset:atIndex: shape: self, _cmd and three integers.
func BenchmarkMessageCostIntegers(b *testing.B) {
	var fn func(p unsafe.Pointer, c int, n uint, a, x uint) uintptr
	purego.RegisterLibFunc(&fn, libc(b), "memchr")
	buf := []byte("abcdefgh")
	for b.Loop() {
		fn(unsafe.Pointer(&buf[0]), 'h', 8, 1, 2)
	}
}

// dispatchThreadgroups:threadsPerThreadgroup: shape: self, _cmd and two MTLSize.
func BenchmarkMessageCostMTLSize(b *testing.B) {
	var fn func(p unsafe.Pointer, c int, n uint, g, t mtlSize) uintptr
	purego.RegisterLibFunc(&fn, libc(b), "memchr")
	buf := []byte("abcdefgh")
	for b.Loop() {
		fn(unsafe.Pointer(&buf[0]), 'h', 8, mtlSize{64, 1, 1}, mtlSize{256, 1, 1})
	}
}
