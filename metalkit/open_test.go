package metalkit

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

func TestOpen(t *testing.T) {
	b, err := Open("cpu", 2, Switches{})
	if err != nil || b.Name() != "cpu" || b.Threads() != 2 {
		t.Fatalf("cpu: %v, %v", b, err)
	}
	if _, err := Open("gpu", 0, Switches{}); err == nil || !strings.Contains(err.Error(), `unknown backend "gpu" (want auto, cpu, metal, metal-harness)`) {
		t.Errorf("unknown kind: %v", err)
	}
	if runtime.GOOS == "darwin" {
		return // the rest is what Linux (CI) does
	}
	if b, err := Open("", 0, Switches{}); err != nil || b.Name() != "cpu" {
		t.Errorf("auto on %s: %v, %v; want the CPU", runtime.GOOS, b, err)
	}
	_, err = Open("metal", 0, Switches{})
	if !errors.Is(err, ErrNeedsMacOS) || !strings.Contains(err.Error(), "the metal backend needs macOS; use metal-harness") {
		t.Errorf("metal on %s: %v", runtime.GOOS, err)
	}
}
