// Package harnesstest gives tests a harness device over the kernels package's library.
package harnesstest

import (
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/harness"
	"github.com/redlite/batch/metalkit/kernels"
)

var shared struct {
	sync.Mutex
	d   *harness.Device
	err error
}

// Device returns the process's shared harness device over kernels.Source(), building it on
// first use (the executable is cached on disk, so later test processes start it at once).
// Without clang-16 the test fails when $CI is set and is skipped otherwise. A device whose
// process died (a kernel crashed) is replaced by a new one for the next caller.
func Device(t testing.TB) device.Device {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.d != nil && shared.d.Dead() != nil {
		shared.d.Close()
		shared.d, shared.err = nil, nil
	}
	if shared.d == nil && shared.err == nil {
		d, err := harness.New(kernels.Source())
		if err == nil {
			shared.d = d.(*harness.Device)
		}
		shared.err = err
	}
	if shared.err != nil {
		if errors.Is(shared.err, harness.ErrNoCompiler) && os.Getenv("CI") == "" {
			t.Skip(shared.err)
		}
		t.Fatal(shared.err)
	}
	return shared.d
}

// New returns a device of its own over kernels.Source() plus extra (test kernels), closed
// when the test ends; same skip rule as Device.
func New(t testing.TB, extra string) device.Device {
	t.Helper()
	return own(t, kernels.Source()+"\n"+extra, harness.Options{})
}

// WithOptions returns a device of its own over kernels.Source() with other limits (a small
// MaxBufferLength, a MemoryLimit), closed when the test ends; same skip rule as Device.
func WithOptions(t testing.TB, opts harness.Options) device.Device {
	t.Helper()
	return own(t, kernels.Source(), opts)
}

func own(t testing.TB, source string, opts harness.Options) device.Device {
	t.Helper()
	d, err := harness.NewWithOptions(source, opts)
	if err != nil {
		if errors.Is(err, harness.ErrNoCompiler) && os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
