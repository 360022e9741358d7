package mtl

import (
	"runtime"
	"sync"
	"unsafe"
)

// The one place that talks to the Objective-C runtime (runtime.go). A message is sent as
// what it is at the machine level: objc_msgSend called with the receiver, the selector and
// the arguments as words, through Runtime.Call (purego.SyscallN) — no reflection, no
// allocation. Each message registers its selector on first use and keeps it.
//
// The words are the arm64 C ABI's (AAPCS64 with Apple's rules), the only one Metal runs on
// here: an argument of at most 8 bytes goes in the next integer register — integers
// zero-extended, bool as 0 or 1, pointers as addresses; NSRange, a 16-byte aggregate of two
// integers, in the next two. MTLSize, a 24-byte aggregate of integers, is passed by the
// caller as a pointer to a copy it made (AAPCS64 B.4: a composite over 16 bytes is copied
// to memory and replaced by a pointer to the copy), which is why msg.go declares it
// *mtlSize; TestArgumentABI checks these against clang's arm64 code for Apple's
// declarations. At most four argument words: objc_msgSend gets six words, all in registers.
//
// A pointer argument is a word the collector does not see. So every pointer argument is
// made to escape (escape: what a word points to is on the heap or in C memory, which never
// moves, even when the goroutine's stack grows during the call) and kept alive until the
// call returns (runtime.KeepAlive).
//
// The one message with floating-point arguments (MPSMatrixMultiplication's initialiser,
// once per product shape) goes through a typed purego.RegisterFunc binding instead (msg8):
// SyscallN passes its words in the integer and the floating-point registers alike.

// arg are the Go types a message argument may have (msg.go says which C type each stands
// for).
type arg interface {
	id | sel | block | uint | int | uint64 | uint32 | bool | unsafe.Pointer | *id | *uint | *byte | *mtlSize | nsRange
}

// res are the Go types a message result may have.
type res interface {
	id | uint | int | uint64 | bool | void | string | unsafe.Pointer
}

// escapeSink and alwaysFalse make escape's argument escape to the heap without ever storing
// it (the runtime's own internal/abi.Escape).
var (
	//lint:ignore U1000 written (never) to make values escape, never read: that is its job
	escapeSink  any
	alwaysFalse bool
)

func escape[T any](v T) {
	if alwaysFalse {
		escapeSink = v
	}
}

// argWords are a message's argument words, at most four.
type argWords struct {
	w [4]uintptr
	n int
}

// put appends v as the integer registers carry it: one word, or two for NSRange.
func put[T arg](a *argWords, v T) {
	escape(v)
	p := unsafe.Pointer(&v)
	switch unsafe.Sizeof(v) {
	case 1:
		a.w[a.n] = uintptr(*(*uint8)(p))
	case 4:
		a.w[a.n] = uintptr(*(*uint32)(p))
	case 8:
		a.w[a.n] = *(*uintptr)(p)
	case 16:
		a.w[a.n] = *(*uintptr)(p)
		a.n++
		a.w[a.n] = *(*uintptr)(unsafe.Add(p, 8))
	}
	a.n++
}

// word is a single-word argument (a selector's or class's name).
func word[T arg](v T) uintptr {
	var a argWords
	put(&a, v)
	return a.w[0]
}

// result is objc_msgSend's x0 as the declared result type.
func result[R res](r uintptr) R {
	var out R
	switch p := any(&out).(type) {
	case *id:
		*p = id(r)
	case *uint:
		*p = uint(r)
	case *int:
		*p = int(r)
	case *uint64:
		*p = uint64(r)
	case *bool:
		// BOOL is bool on arm64: the low byte, the rest unspecified.
		*p = uint8(r) != 0
	case *string:
		*p = cString(r)
	case *unsafe.Pointer:
		*p = cmem(r)
	}
	return out
}

// cmem is C memory at addr (never moved or freed by the collector).
func cmem(addr uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }

// cString copies a NUL-terminated C string; 0 is "".
func cString(addr uintptr) string {
	if addr == 0 {
		return ""
	}
	p := (*byte)(cmem(addr))
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// cStringOf is s NUL-terminated, for a const char * argument.
func cStringOf(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}

// callWords are the six words of a C call. SyscallN's arguments escape (it is
// //go:uintptrescapes), so a slice built at each call would be an allocation per message:
// the words go in an array on the heap instead, reused — a pass's own (sendOn, for the
// messages of every dispatch) or one from a pool.
type callWords [6]uintptr

var words = sync.Pool{New: func() any { return new(callWords) }}

// callC calls the C function at fn with up to six integer arguments and returns x0.
func callC(fn uintptr, a0, a1, a2, a3, a4, a5 uintptr) uintptr {
	w := words.Get().(*callWords)
	r := w.call(fn, a0, a1, a2, a3, a4, a5)
	words.Put(w)
	return r
}

// call calls fn with the arguments in w.
func (w *callWords) call(fn uintptr, a0, a1, a2, a3, a4, a5 uintptr) uintptr {
	*w = callWords{a0, a1, a2, a3, a4, a5}
	r, _, _ := rt.Call(fn, w[:]...)
	return r
}

// selector is b's registered selector, registered on first use.
func (b *msgBase) selector() sel {
	b.once.Do(func() {
		name := cStringOf(b.name)
		b.sel = sel(callC(rt.RegisterName, word(name), 0, 0, 0, 0, 0))
		runtime.KeepAlive(name)
	})
	return b.sel
}

// call sends b to o with the argument words.
func (b *msgBase) call(o id, a0, a1, a2, a3 uintptr) uintptr {
	return callC(rt.MsgSend, uintptr(o), uintptr(b.selector()), a0, a1, a2, a3)
}

func (c *class) get() id {
	c.once.Do(func() {
		name := cStringOf(c.name)
		c.id = id(callC(rt.GetClass, word(name), 0, 0, 0, 0, 0))
		runtime.KeepAlive(name)
	})
	return c.id
}

// send sends b to o with the argument words, through s if it is not nil.
func (b *msgBase) send(s *callWords, o id, a *argWords) uintptr {
	if s != nil {
		return s.call(rt.MsgSend, uintptr(o), uintptr(b.selector()), a.w[0], a.w[1], a.w[2], a.w[3])
	}
	return b.call(o, a.w[0], a.w[1], a.w[2], a.w[3])
}

func (m *msg0[R]) send(o id) R {
	return result[R](m.call(o, 0, 0, 0, 0))
}

func (m *msg1[R, A]) send(o id, a A) R { return m.sendOn(nil, o, a) }

func (m *msg1[R, A]) sendOn(s *callWords, o id, a A) R {
	var w argWords
	put(&w, a)
	r := m.msgBase.send(s, o, &w)
	runtime.KeepAlive(a)
	return result[R](r)
}

func (m *msg2[R, A, B]) send(o id, a A, b B) R { return m.sendOn(nil, o, a, b) }

func (m *msg2[R, A, B]) sendOn(s *callWords, o id, a A, b B) R {
	var w argWords
	put(&w, a)
	put(&w, b)
	r := m.msgBase.send(s, o, &w)
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	return result[R](r)
}

func (m *msg3[R, A, B, C]) send(o id, a A, b B, c C) R { return m.sendOn(nil, o, a, b, c) }

func (m *msg3[R, A, B, C]) sendOn(s *callWords, o id, a A, b B, c C) R {
	var w argWords
	put(&w, a)
	put(&w, b)
	put(&w, c)
	r := m.msgBase.send(s, o, &w)
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	runtime.KeepAlive(c)
	return result[R](r)
}

func (m *msg4[R, A, B, C, D]) send(o id, a A, b B, c C, d D) R { return m.sendOn(nil, o, a, b, c, d) }

func (m *msg4[R, A, B, C, D]) sendOn(s *callWords, o id, a A, b B, c C, d D) R {
	var w argWords
	put(&w, a)
	put(&w, b)
	put(&w, c)
	put(&w, d)
	r := m.msgBase.send(s, o, &w)
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	runtime.KeepAlive(c)
	runtime.KeepAlive(d)
	return result[R](r)
}

// send binds objc_msgSend to the message's Go signature (purego.RegisterFunc, through
// Runtime.RegisterFunc) on first use: the floating-point arguments go in d0 and d1.
func (m *msg8[R, A, B, C, D, E, F, G, H]) send(o id, a A, b B, c C, d D, e E, f F, g G, h H) R {
	m.bind.Do(func() { rt.RegisterFunc(&m.fn, rt.MsgSend) })
	return m.fn(o, m.selector(), a, b, c, d, e, f, g, h)
}
