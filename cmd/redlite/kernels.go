package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// cpuKernels describes what the CPU backend runs here for a model's quantized matrices:
// the vector kernel set of this CPU, and for each type that takes the 8-bit path on the
// backend's dot path its kernels ("avx512vnni (8-bit: Q4_K avx512vnni, rows repacked by 16; Q6_K avx2,
// four tokens)"), and the memory the repacked layouts take. Empty for other backends.
func cpuKernels(b ml.Backend, f *gguf.File) string {
	cb, ok := b.(*cpu.Backend)
	if !ok {
		return ""
	}
	var types []quant.Type
	var repacked int
	for _, t := range f.Tensors {
		if len(t.Dims) >= 2 && cb.Int8(t.Type) && !slices.Contains(types, t.Type) {
			types = append(types, t.Type)
		}
		dims := make([]int, len(t.Dims))
		for i, d := range t.Dims {
			dims[i] = int(d)
		}
		repacked += cb.RepackedBytes(t.Type, dims)
	}
	slices.Sort(types)
	var parts []string
	for _, t := range types {
		parts = append(parts, fmt.Sprintf("%v %s", t, quant.Int8Kernel(t)))
	}
	if len(parts) == 0 {
		return quant.KernelSet()
	}
	s := fmt.Sprintf("%s (8-bit: %s)", quant.KernelSet(), strings.Join(parts, "; "))
	switch held := cb.HostWeightBytes(); {
	case held > 0:
		// A loaded model: what binding it repacked.
		s += fmt.Sprintf(", %.1f MiB of repacked rows beside the file's", float64(held)/(1<<20))
	case repacked > 0:
		// Nothing bound yet: every matrix the kernels would repack, some of which a model
		// binds as stored (an embedding beside its own output matrix, matrices past the
		// backend's limit).
		s += fmt.Sprintf(", up to %.1f MiB of repacked rows beside the file's", float64(repacked)/(1<<20))
	}
	return s
}
