package metalkit

import (
	stdcontext "context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
)

// GPU is a Mac's GPU as the roofline model sees it: memory bandwidth and float32 peak.
type GPU struct {
	Name      string
	Bandwidth float64 // bytes per second
	FLOPS     float64 // float32 operations per second
}

// GPUs are the M4 family's published figures (Apple: memory bandwidth; float32 peak from
// the GPU core counts of the 10-, 20- and 40-core parts at about 0.43 TFLOPS per core).
var GPUs = []GPU{
	{"M4", 120e9, 4.3e12},
	{"M4 Pro", 273e9, 8.6e12},
	{"M4 Max", 546e9, 17.2e12},
}

// Pass is what one forward pass issues on the Metal backend: its dispatches by label with
// their modelled bytes and FLOPs, counted on a device that runs nothing.
type Pass struct {
	Name   string
	Tokens int // tokens the pass computes
	Counts []device.Count
	// Encode is the host's time to encode the pass (the backend and the graph, with a device
	// that does nothing; the Metal device adds its Objective-C messages on top).
	Encode time.Duration
}

// Dispatches, Bytes and FLOPs total the pass.
func (p Pass) Dispatches() (n int) {
	for _, c := range p.Counts {
		n += c.Dispatches
	}
	return n
}

func (p Pass) Bytes() (n int64) {
	for _, c := range p.Counts {
		n += c.Read + c.Written
	}
	return n
}

func (p Pass) FLOPs() (n int64) {
	for _, c := range p.Counts {
		n += c.FLOPs
	}
	return n
}

// Time is the roofline bound of the pass on g: each dispatch group takes the longer of
// moving its bytes and doing its arithmetic, and the groups run one after another.
func (p Pass) Time(g GPU) time.Duration {
	var s float64
	for _, c := range p.Counts {
		s += max(float64(c.Read+c.Written)/g.Bandwidth, float64(c.FLOPs)/g.FLOPS)
	}
	return time.Duration(s * float64(time.Second))
}

// CountOptions say which passes to count.
type CountOptions struct {
	Depths []int    // a decode step after this many positions, for each
	Chunk  int      // a prefill pass of this many tokens from position 0 (0: none)
	KV     ml.DType // cache precision
}

// CountPasses loads the model at path on a recording device (the weights are mapped, never
// read: a layout-only file from `redlite synth --layout` will do) and counts one decode step
// at each depth and one prefill chunk.
func CountPasses(ctx stdcontext.Context, path string, o CountOptions) ([]Pass, error) {
	rec := device.NewRecorder(kernels.Source())
	m, err := engine.Load(path, engine.Options{Backend: New(rec)})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var out []Pass
	if o.Chunk > 0 {
		p, err := countPass(ctx, m, rec, fmt.Sprintf("prefill %d", o.Chunk), 0, o.Chunk, o.KV)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	for _, d := range o.Depths {
		p, err := countPass(ctx, m, rec, fmt.Sprintf("decode @ %d", d), d, 1, o.KV)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// countPass fills a session to depth (encoding only: nothing runs), then counts the pass of
// n tokens that follows.
func countPass(ctx stdcontext.Context, m *engine.Model, rec *device.Recorder, name string, depth, n int, kv ml.DType) (Pass, error) {
	s, err := m.NewSession(engine.SessionOptions{Context: depth + n*encodeRuns, KV: kv})
	if err != nil {
		return Pass{}, err
	}
	defer s.Close()
	tokens := make([]int32, max(depth, n*encodeRuns))
	if depth > 0 {
		if _, err := s.Prefill(ctx, tokens[:depth], engine.PrefillOptions{Chunk: 2048}); err != nil {
			return Pass{}, err
		}
	}
	// The first pass is counted; the encoding time is the median of encodeRuns passes, since
	// one pass is short enough for a collection or a busy core to double it.
	var counts []device.Count
	times := make([]time.Duration, encodeRuns)
	for i := range times {
		rec.Reset()
		start := time.Now()
		if _, err := s.Prefill(ctx, tokens[:n], engine.PrefillOptions{}); err != nil {
			return Pass{}, err
		}
		times[i] = time.Since(start)
		if i == 0 {
			counts = rec.Counts()
		}
	}
	slices.Sort(times)
	return Pass{Name: name, Tokens: n, Counts: counts, Encode: times[len(times)/2]}, nil
}

// encodeRuns is how many times each pass is encoded to time it.
const encodeRuns = 5

// WriteRoofline prints the passes as Markdown: totals and bounds per GPU, then each pass's
// dispatch groups.
func WriteRoofline(w io.Writer, passes []Pass) {
	fmt.Fprintf(w, "| pass | dispatches | GB moved | GFLOP | host encoding |")
	for _, g := range GPUs {
		fmt.Fprintf(w, " %s (%.0f GB/s) |", g.Name, g.Bandwidth/1e9)
	}
	fmt.Fprintf(w, "\n|---|---:|---:|---:|---:|")
	for range GPUs {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, p := range passes {
		fmt.Fprintf(w, "| %s | %d | %.3f | %.1f | %.2f ms |", p.Name, p.Dispatches(), float64(p.Bytes())/1e9, float64(p.FLOPs())/1e9, float64(p.Encode.Microseconds())/1e3)
		for _, g := range GPUs {
			t := p.Time(g)
			fmt.Fprintf(w, " %.2f ms, %.0f tok/s |", float64(t.Microseconds())/1e3, float64(p.Tokens)/t.Seconds())
		}
		fmt.Fprintln(w)
	}
	for _, p := range passes {
		fmt.Fprintf(w, "\n%s, by kernel (bound on the M4 Max):\n\n| kernel | dispatches | MB read | MB written | GFLOP | bound |\n|---|---:|---:|---:|---:|---:|\n", p.Name)
		g := GPUs[len(GPUs)-1]
		for _, c := range p.Counts {
			t := max(float64(c.Read+c.Written)/g.Bandwidth, float64(c.FLOPs)/g.FLOPS)
			fmt.Fprintf(w, "| %s | %d | %.1f | %.1f | %.2f | %.3f ms |\n", c.Label, c.Dispatches, float64(c.Read)/1e6, float64(c.Written)/1e6, float64(c.FLOPs)/1e9, t*1e3)
		}
	}
}
