package mtl_test

import (
	stdcontext "context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/synth"
	"github.com/redlite/batch/metalkit"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
	"github.com/redlite/batch/metalkit/mtl"
)

// BenchmarkEncodeDecodeStep measures what the Metal device adds to the host's side of one
// decode step of Qwen3-Next-80B-A3B (IQ2_XXS, f16 KV, at 4,096 positions): the step's
// dispatches, as the backend encodes them, replayed through the device's Encode, Commit and
// Wait and its Objective-C message layer into a stand-in C library (package standin) that
// does nothing but return. So the Go side of every message — the layer, purego's call into
// C — is what is timed; on a Mac, objc_msgSend and Metal's own encoding come on top.
//
// Besides ns/op it reports cpu-ns/op (the process's CPU time, steadier than wall time on a
// loaded machine), the step's dispatches and the messages sent per step (-v logs them by
// selector).
//
// The model is a layout-only file (`redlite synth --shape qwen3next-80b --type iq2_xxs
// --layout`): the real shapes on almost no disk. Writing it takes about 10 s;
// $REDLITE_BENCH_80B names an existing one to skip that.
//
//	go test -run XXX -bench EncodeDecodeStep -benchmem ./metalkit/mtl
func BenchmarkEncodeDecodeStep(b *testing.B) {
	lib, r := mtl.StandIn(b)
	dev, err := mtl.NewWithRuntime(r, kernels.Source())
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	cap := &capture{Device: dev}
	m, err := engine.Load(layout80B(b), engine.Options{Backend: metalkit.New(cap)})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ctx := stdcontext.Background()
	s := session(b, m)
	defer func() { s.Close() }()
	cap.on(true)
	if _, err := s.Decode(ctx, 1); err != nil {
		b.Fatal(err)
	}
	step := cap.on(false)
	if len(step) < 1000 {
		b.Fatalf("a decode step of Qwen3-Next-80B encoded %d dispatches", len(step))
	}

	b.Run("device", func(b *testing.B) {
		lib.Reset()
		b.ReportAllocs()
		cpu := cpuTime()
		for b.Loop() {
			cmd := dev.NewCommands()
			for _, d := range step {
				cmd.Encode(d)
			}
			cmd.Commit()
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
		}
		for _, n := range []string{"setComputePipelineState:", "setBuffer:offset:atIndex:", "setBuffers:offsets:withRange:", "setBytes:length:atIndex:", "setThreadgroupMemoryLength:atIndex:", "dispatchThreadgroups:threadsPerThreadgroup:"} {
			b.Logf("%s %d per step", n, lib.Count(n)/uint64(b.N))
		}
		b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(len(step)), "dispatches/op")
		b.ReportMetric(float64(lib.Messages())/float64(b.N), "messages/op")
	})

	// The whole step for comparison: the graph and the backend (metalkit's own host
	// cost, what `redlite roofline` times on the recording device) and the device.
	b.Run("step", func(b *testing.B) {
		lib.Reset()
		b.ReportAllocs()
		cpu := cpuTime()
		for b.Loop() {
			decode(b, m, &s)
		}
		b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(lib.Count("commit"))/float64(b.N), "commits/op")
		b.ReportMetric(float64(lib.Messages())/float64(b.N), "messages/op")
	})

	// The whole step with a bounded expert cache of 4 GiB (Red Lite's small-Mac size): the
	// list is committed and waited for at each of the 48 MoE layers and the routing read
	// back, and each expert dispatch carries its slot table. The stand-in runs nothing, so
	// every token routes to expert 0 and every lookup after the first step hits: this is
	// the split's cost and the bookkeeping of a hit, not of misses (a miss also copies its
	// slice, about 1 MB, from the file).
	b.Run("step-cached", func(b *testing.B) {
		be := m.Backend.(*metalkit.Backend)
		if err := be.SetExpertCache(4 << 30); err != nil {
			b.Fatal(err)
		}
		defer be.SetExpertCache(0)
		if _, err := s.Decode(ctx, 1); err != nil { // the misses of the first step
			b.Fatal(err)
		}
		lib.Reset()
		b.ReportAllocs()
		cpu := cpuTime()
		for b.Loop() {
			decode(b, m, &s)
		}
		b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(lib.Count("commit"))/float64(b.N), "commits/op")
		b.ReportMetric(float64(lib.Messages())/float64(b.N), "messages/op")
		if st := be.ExpertStats(); st.Hits == 0 {
			b.Errorf("no lookups through the cache: %+v", st)
		}
	})
}

// decode runs one decode step of *s, replacing it with a new session when it is full.
func decode(b *testing.B, m *engine.Model, s **engine.Session) {
	if (*s).Pos() == (*s).Capacity() {
		b.StopTimer()
		(*s).Close()
		*s = session(b, m)
		b.StartTimer()
	}
	if _, err := (*s).Decode(stdcontext.Background(), 1); err != nil {
		b.Fatal(err)
	}
}

// cpuTime is the process's user and system CPU time in ns: on this shared machine the wall
// time of a step varies with the other builds' load several times over, its CPU time much
// less (it still counts the collector's work beside the benchmark).
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// depth is where the measured steps decode: the roofline table's "decode @ 4096".
const depth = 4096

// session is a session of m filled to depth (encoded only: nothing runs).
func session(b *testing.B, m *engine.Model) *engine.Session {
	s, err := m.NewSession(engine.SessionOptions{Context: depth + 1024, KV: ml.F16})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Prefill(stdcontext.Background(), make([]int32, depth), engine.PrefillOptions{Chunk: 2048}); err != nil {
		b.Fatal(err)
	}
	return s
}

// layout80B writes the layout-only Qwen3-Next-80B file, or names $REDLITE_BENCH_80B.
func layout80B(b *testing.B) string {
	if p := os.Getenv("REDLITE_BENCH_80B"); p != "" {
		return p
	}
	path := filepath.Join(b.TempDir(), "qwen3next-80b-iq2_xxs.gguf")
	if _, err := synth.WriteFile(stdcontext.Background(), path, "qwen3next-80b", synth.Options{Type: synth.IQ2_XXS, Layout: true}); err != nil {
		b.Fatal(err)
	}
	return path
}

// capture passes everything to the device and, while on, keeps the dispatches encoded.
type capture struct {
	device.Device
	mu       sync.Mutex
	active   bool
	captured []device.Dispatch
}

func (c *capture) on(active bool) []device.Dispatch {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active = active
	out := c.captured
	c.captured = nil
	return out
}

func (c *capture) NewCommands() device.Commands {
	return &captureCommands{Commands: c.Device.NewCommands(), c: c}
}

type captureCommands struct {
	device.Commands
	c *capture
}

func (cc *captureCommands) Encode(d device.Dispatch) {
	cc.c.mu.Lock()
	if cc.c.active {
		cc.c.captured = append(cc.c.captured, d)
	}
	cc.c.mu.Unlock()
	cc.Commands.Encode(d)
}
