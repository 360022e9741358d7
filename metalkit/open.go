package metalkit

import (
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/ml"
)

// The backends the daemon (REDLITE_BACKEND) and the engine commands (--backend) choose from.
const (
	KindAuto    = "auto"          // Metal on a Mac with a Metal device, else the CPU
	KindCPU     = "cpu"           // engine/cpu
	KindMetal   = "metal"         // this package on the Mac's GPU
	KindHarness = "metal-harness" // this package on the harness device: the Metal kernels run on the CPU (tests, Linux)
)

// Kinds lists the choices, for help texts and errors.
var Kinds = []string{KindAuto, KindCPU, KindMetal, KindHarness}

// ErrNeedsMacOS is returned for the metal backend on another system.
var ErrNeedsMacOS = errors.New("the metal backend needs macOS; use metal-harness to run the Metal kernels on the CPU")

// ParseKind checks a backend name; empty means auto.
func ParseKind(s string) (string, error) {
	if s == "" {
		return KindAuto, nil
	}
	for _, k := range Kinds {
		if s == k {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown backend %q (want %s)", s, strings.Join(Kinds, ", "))
}

// Open makes the backend of the given kind; threads is the CPU backend's parallelism
// (0: one per core), env the Metal backend's switches. Auto takes the Metal device on macOS
// when there is one and the CPU otherwise.
func Open(kind string, threads int, env Switches) (ml.Backend, error) {
	k, err := ParseKind(kind)
	if err != nil {
		return nil, err
	}
	switch k {
	case KindAuto:
		if runtime.GOOS == "darwin" {
			if dev, err := openMetal(); err == nil {
				return env.apply(New(dev)), nil
			}
		}
		return cpu.New(threads), nil
	case KindCPU:
		return cpu.New(threads), nil
	case KindMetal:
		dev, err := openMetal()
		if err != nil {
			return nil, fmt.Errorf("backend metal: %w", err)
		}
		return env.apply(New(dev)), nil
	default: // KindHarness
		dev, err := openHarness()
		if err != nil {
			return nil, fmt.Errorf("backend metal-harness: %w", err)
		}
		b := env.apply(New(dev))
		b.name = KindHarness
		return b, nil
	}
}
