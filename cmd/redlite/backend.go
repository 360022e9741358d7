package main

import (
	"errors"
	"flag"
	"os"
	"strings"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/internal/envconf"
	"github.com/redlite/batch/metalkit"
)

// backendFlag adds --backend to an engine command: the same choice as the daemon's
// REDLITE_BACKEND.
func backendFlag(fs *flag.FlagSet) *string {
	return fs.String("backend", metalkit.KindAuto, "engine backend: "+strings.Join(metalkit.Kinds, ", ")+
		" (auto: Metal on a Mac with a Metal device, else the CPU; metal-harness runs the Metal kernels on the CPU)")
}

// openBackend makes the backend --backend names, with the Metal switches of the
// environment (REDLITE_METAL_*, as the daemon reads them); an unknown name or a bad
// switch is a usage error.
func openBackend(kind string, threads int) (ml.Backend, error) {
	if _, err := metalkit.ParseKind(kind); err != nil {
		return nil, usageErr("--backend: %v", err)
	}
	env, err := envconf.Parse[metalkit.Switches](os.Environ())
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return metalkit.Open(kind, threads, env)
}

// loadModel loads a model file on the backend --backend names.
func loadModel(path, kind string, threads int) (*engine.Model, error) {
	return loadModelDot(path, kind, threads, "", 0)
}

// loadModelDot is loadModel with the CPU backend's dot path (bench's --dot).
func loadModelDot(path, kind string, threads int, dot string, expertCacheMiB int) (*engine.Model, error) {
	b, err := openBackend(kind, threads)
	if err != nil {
		return nil, err
	}
	m, err := engine.Load(path, engine.Options{Backend: b, Threads: threads, CPUDot: dot, ExpertCacheMiB: expertCacheMiB})
	if errors.Is(err, gguf.ErrFormat) || errors.Is(err, model.ErrModel) {
		// A file that is not a usable model is a bad argument, as the daemon's bad
		// REDLITE_MODEL is a bad setting: exit 2.
		return nil, usageErr("--model: %v", err)
	}
	return m, err
}
