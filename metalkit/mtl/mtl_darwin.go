//go:build darwin

package mtl

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/ebitengine/purego"

	"github.com/redlite/batch/metalkit/device"
)

// The frameworks, opened once: libobjc and Metal give the runtime the device talks to.
// Apple: "In macOS, in order for the system to provide a default Metal device object, you
// must link to the Core Graphics framework" — a command line tool like ours links nothing,
// so it is opened by hand before the first device.
var (
	frameworksOnce sync.Once
	frameworksErr  error
)

func openFrameworks() error {
	frameworksOnce.Do(func() {
		frameworksErr = func() error {
			objc, err := purego.Dlopen("/usr/lib/libobjc.A.dylib", purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err != nil {
				return err
			}
			metal, err := purego.Dlopen("/System/Library/Frameworks/Metal.framework/Metal", purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err != nil {
				return err
			}
			if _, err := purego.Dlopen("/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics", purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
				return err
			}
			r := Runtime{Call: purego.SyscallN, RegisterFunc: purego.RegisterFunc}
			if r.MsgSend, err = purego.Dlsym(objc, "objc_msgSend"); err != nil {
				return err
			}
			if r.RegisterName, err = purego.Dlsym(objc, "sel_registerName"); err != nil {
				return err
			}
			if r.GetClass, err = purego.Dlsym(objc, "objc_getClass"); err != nil {
				return err
			}
			if r.PoolPush, err = purego.Dlsym(objc, "objc_autoreleasePoolPush"); err != nil {
				return err
			}
			if r.PoolPop, err = purego.Dlsym(objc, "objc_autoreleasePoolPop"); err != nil {
				return err
			}
			if r.CreateDevice, err = purego.Dlsym(metal, "MTLCreateSystemDefaultDevice"); err != nil {
				return err
			}
			return installRuntime(r)
		}()
		if frameworksErr != nil {
			frameworksErr = fmt.Errorf("%w: %v", ErrUnavailable, frameworksErr)
		}
	})
	return frameworksErr
}

// DefaultFacts reads the default Metal device's facts.
func DefaultFacts() (Facts, error) {
	if err := openFrameworks(); err != nil {
		return Facts{}, err
	}
	var f Facts
	err := ErrUnavailable
	withPool(func() {
		dev := createDevice()
		if dev == 0 {
			return
		}
		defer msgRelease.send(dev)
		f = Facts{
			Name:                     goString(msgName.send(dev)),
			RecommendedMaxWorkingSet: msgRecommendedMaxWorkingSetSize.send(dev),
			CurrentAllocated:         uint64(msgCurrentAllocatedSize.send(dev)),
			UnifiedMemory:            msgHasUnifiedMemory.send(dev),
		}
		err = nil
	})
	return f, err
}

// New opens the default Metal device and compiles source (metalkit/kernels.Source()) into
// its library. Only Apple Silicon is supported: the backend relies on unified memory, and
// the arm64 C ABI is the one the message layer passes arguments in (msg_call.go).
func New(source string) (device.Device, error) {
	if runtime.GOARCH != "arm64" {
		return nil, fmt.Errorf("%w (the Metal backend needs Apple Silicon, this is %s)", ErrUnavailable, runtime.GOARCH)
	}
	if err := openFrameworks(); err != nil {
		return nil, err
	}
	d, err := newDevice(source)
	if err != nil {
		return nil, err
	}
	return d, nil
}
