package mtl

import (
	"errors"
	"sync"

	"github.com/redlite/batch/metalkit/device"
)

// Runtime is the Objective-C runtime and Metal entry point the device calls: the addresses
// of the C functions and the means to call them. On a Mac it is libobjc and Metal
// (mtl_darwin.go); on Linux, in tests, a stand-in library (package standin), so that the
// device's host side — its encoding, its message layer, the argument layout — runs and is
// measured without a GPU. The means of calling are passed in so that this package links
// purego only where there is Metal.
type Runtime struct {
	// MsgSend, RegisterName, GetClass, PoolPush and PoolPop are objc_msgSend,
	// sel_registerName, objc_getClass, objc_autoreleasePoolPush and objc_autoreleasePoolPop
	// (what clang emits for @autoreleasepool); CreateDevice is MTLCreateSystemDefaultDevice.
	MsgSend, RegisterName, GetClass, PoolPush, PoolPop, CreateDevice uintptr
	// Call calls the C function at fn with integer arguments (purego.SyscallN): how every
	// message is sent (msg_call.go).
	Call func(fn uintptr, args ...uintptr) (r1, r2, err uintptr)
	// RegisterFunc binds a Go function variable to a C function (purego.RegisterFunc): for
	// the one message with floating-point arguments.
	RegisterFunc func(fptr any, cfn uintptr)
}

// The installed runtime: one per process, since each message binds its selector once.
var (
	rtMu        sync.Mutex
	rt          Runtime
	rtInstalled bool
)

// installRuntime makes r the runtime every message goes to. Installing another afterwards
// is an error (the selectors are r's).
func installRuntime(r Runtime) error {
	rtMu.Lock()
	defer rtMu.Unlock()
	if rtInstalled {
		if r.MsgSend != rt.MsgSend {
			return errors.New("mtl: another Objective-C runtime is installed")
		}
		return nil
	}
	if r.MsgSend == 0 || r.RegisterName == 0 || r.GetClass == 0 || r.PoolPush == 0 || r.PoolPop == 0 || r.CreateDevice == 0 || r.Call == nil || r.RegisterFunc == nil {
		return errors.New("mtl: incomplete Objective-C runtime")
	}
	rt, rtInstalled = r, true
	return nil
}

// createDevice is MTLCreateSystemDefaultDevice(): the device, +1.
func createDevice() id { return id(callC(rt.CreateDevice, 0, 0, 0, 0, 0, 0)) }

// poolPush pushes an autorelease pool on this thread and returns its token.
func poolPush() uintptr { return callC(rt.PoolPush, 0, 0, 0, 0, 0, 0) }

// poolPop pops the pool of token, and any pushed after it.
func poolPop(token uintptr) { callC(rt.PoolPop, token, 0, 0, 0, 0, 0) }

// NewWithRuntime opens the device of runtime r and compiles source into its library, as
// New does with the Mac's. Tests and benchmarks on Linux use it with package standin.
func NewWithRuntime(r Runtime, source string) (device.Device, error) {
	if err := installRuntime(r); err != nil {
		return nil, err
	}
	d, err := newDevice(source)
	if err != nil {
		return nil, err
	}
	return d, nil
}
