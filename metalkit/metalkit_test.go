package metalkit

import (
	"errors"
	"runtime"
	"testing"
)

func TestDefaultDevice(t *testing.T) {
	d, err := DefaultDevice()
	if runtime.GOOS != "darwin" {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("DefaultDevice on %s = %v, %v; want ErrUnavailable", runtime.GOOS, d, err)
		}
		return
	}
	// On a Mac (not run in CI, which is Linux): every Apple Silicon Mac has a device with
	// unified memory and a working-set limit of several GiB.
	if err != nil {
		t.Fatal(err)
	}
	if !d.UnifiedMemory || d.LimitMiB() < 4096 || d.Name == "" {
		t.Errorf("implausible device: %+v", d)
	}
}

func TestLimitMiB(t *testing.T) {
	d := Device{RecommendedMaxWorkingSet: 21741<<20 + 12345}
	if got := d.LimitMiB(); got != 21741 {
		t.Errorf("LimitMiB = %d, want 21741", got)
	}
}
