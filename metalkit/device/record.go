package device

import (
	"fmt"
	"regexp"
	"sort"
	"sync"
)

// Recorder is a device that runs nothing: buffers have a length and no memory, and
// dispatches are counted with their modelled costs. It shows what a pass issues on a
// model too big for this machine (a sparse, layout-only GGUF of Qwen3-Next-80B) and
// measures the host's encoding time alone: the roofline model of metalkit/README.md.
type Recorder struct {
	kernels map[string]bool

	mu     sync.Mutex
	counts map[string]*Count
	n      int
}

// Count is what the dispatches of one label added up to.
type Count struct {
	Label      string
	Dispatches int
	Read       int64
	Written    int64
	FLOPs      int64
}

var kernelDecl = regexp.MustCompile(`(?m)^\s*kernel\s+void\s+(\w+)\s*\(`)

// NewRecorder makes a recorder that knows the kernels of source (the library both real
// devices compile), so a pipeline of an unknown kernel fails here as it would on a GPU.
func NewRecorder(source string) *Recorder {
	r := &Recorder{kernels: map[string]bool{}, counts: map[string]*Count{}}
	for _, m := range kernelDecl.FindAllStringSubmatch(source, -1) {
		r.kernels[m[1]] = true
	}
	return r
}

func (r *Recorder) Name() string { return "recorder" }

func (r *Recorder) NewBuffer(size int64) (Buffer, error) {
	if size < 0 {
		return nil, &Error{Op: "new buffer", Err: fmt.Errorf("negative size %d", size)}
	}
	return nullBuffer(size), nil
}

func (r *Recorder) WrapBuffer(data []byte) (Buffer, error) { return nullBuffer(len(data)), nil }

// MaxBufferLength is an M-series GPU's (half the unified memory of a 64 GiB Mac is a
// common figure; the backend only needs it to split the model's mapping).
func (r *Recorder) MaxBufferLength() int64 { return 1 << 35 }

func (r *Recorder) Pipeline(name string, consts ...Constant) (Pipeline, error) {
	if !r.kernels[name] {
		return nil, &Error{Op: "pipeline " + name, Err: fmt.Errorf("no kernel %q in the library", name)}
	}
	return nullPipeline(name), nil
}

func (r *Recorder) NewCommands() Commands { return &recordCommands{r: r} }

func (r *Recorder) Close() error { return nil }

// Counts returns what was dispatched since the last Reset, by label, most bytes first.
func (r *Recorder) Counts() []Count {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Count, 0, len(r.counts))
	for _, c := range r.counts {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Read+out[i].Written != out[j].Read+out[j].Written {
			return out[i].Read+out[i].Written > out[j].Read+out[j].Written
		}
		return out[i].Label < out[j].Label
	})
	return out
}

// Reset forgets the counts.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts = map[string]*Count{}
	r.n = 0
}

type nullBuffer int64

func (b nullBuffer) Len() int64 { return int64(b) }

func (b nullBuffer) Write(off int64, src []byte) error { return b.check("write", off, len(src)) }

func (b nullBuffer) Read(off int64, dst []byte) error {
	clear(dst)
	return b.check("read", off, len(dst))
}

func (b nullBuffer) check(op string, off int64, n int) error {
	if off < 0 || off+int64(n) > int64(b) {
		return &Error{Op: op, Err: fmt.Errorf("[%d, %d) outside a buffer of %d bytes", off, off+int64(n), int64(b))}
	}
	return nil
}

func (b nullBuffer) Release() {}

type nullPipeline string

func (p nullPipeline) Name() string      { return string(p) }
func (p nullPipeline) MaxThreads() int   { return 1024 }
func (p nullPipeline) SIMDWidth() int    { return 32 }
func (p nullPipeline) StaticShared() int { return 0 }

type recordCommands struct {
	r         *Recorder
	dispatch  []Dispatch
	committed bool
	err       error
}

func (c *recordCommands) Encode(d Dispatch) {
	if c.committed {
		c.err = &Error{Op: "encode", Kernel: d.Pipeline.Name(), Err: fmt.Errorf("command list already committed")}
		return
	}
	for _, b := range d.Buffers {
		if b.Buffer == nil || b.Offset < 0 || b.Offset > b.Buffer.Len() {
			c.err = &Error{Op: "encode", Kernel: d.Pipeline.Name(), Err: fmt.Errorf("buffer %d bound at offset %d outside it", b.Index, b.Offset)}
			return
		}
	}
	c.dispatch = append(c.dispatch, d)
}

func (c *recordCommands) Commit() {
	c.committed = true
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	for _, d := range c.dispatch {
		label := d.Cost.Label
		if label == "" {
			label = d.Pipeline.Name()
		}
		k := c.r.counts[label]
		if k == nil {
			k = &Count{Label: label}
			c.r.counts[label] = k
		}
		k.Dispatches++
		k.Read += d.Cost.Read
		k.Written += d.Cost.Written
		k.FLOPs += d.Cost.FLOPs
		c.r.n++
	}
}

func (c *recordCommands) Wait() error { return c.err }
