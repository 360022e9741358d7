package metalkit

import (
	"errors"
	"fmt"
	"slices"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/metalkit/device"
)

// A context records operations as the graph issues them (checking shapes then, where the
// misuse is on the stack) and runs them at Compute: it plans where every intermediate lives
// in one scratch buffer from the whole pass, encodes every operation in order into one
// command list, commits it and waits.
//
// The plan follows liveness, as ggml-alloc does: an intermediate occupies its bytes from the
// operation that makes it to the last one that reads it, directly or through a view
// (Reshape, Rows), and then gives them to the next first-fit placement; an element-wise
// operation writes its output over an input that dies there. So a pass holds the peak of
// what is live at once. Tensors that no operation of the pass consumes are its outputs: they
// keep their bytes until Close and may be Read.
//
// Each Compute plans what was issued since the previous one in a scratch buffer of its own
// (a segment), taken from the backend's pool of buffers and given back at Close, so the
// outputs of an earlier Compute stay where they are. Graphs run one Compute per pass.
type context struct {
	b    *Backend
	ops  []op
	made []*tensor // tensors of the pass (roots and views), in order
	next int       // first operation not run yet
	seen int       // tensors of made already looked at by Compute
	segs []segment
	// rope holds this Compute's rotation tables by positions and rotation (ops.go).
	rope map[ml.RoPETableKey]*tensor
	// iotas holds this Compute's row-id inputs by length (ops.go).
	iotas map[int]*tensor
	// tables holds this Compute's block tables of batched attention (attention_batch.go).
	tables []*blockTables
	// named are the tensors given to Name since the last Compute, for Backend.Hook.
	named []named
	err   error // the first failure; the pass is over
	// routes holds the router ids read back for the expert cache (experts.go), by ids
	// tensor; cacheHeld whether this Compute holds the cache.
	routes    map[*tensor][]float32
	cacheHeld bool
}

// op is one recorded operation.
type op struct {
	name string
	ins  []*tensor
	outs []*tensor
	// inPlace marks operations whose output element i depends only on the inputs' elements
	// i, read by the thread that writes it: the output may take the bytes of an input that
	// dies here.
	inPlace bool
	encode  func(e *encoder)
	// temp is scratch the operation alone uses (a weight decoded for the MPS product):
	// placed apart from its inputs and outputs, and free again after it.
	temp *tensor

	// experts and sum are a MatMulExperts's and a WeightedSum's operands, for the fusion of
	// the two (fuse.go); nil for other operations.
	experts *expertsCall
	sum     *sumCall
}

// segment is the scratch buffer of one Compute.
type segment struct {
	buf  device.Buffer
	need int64
}

// tensor is an array of float32 on the device. A root owns its bytes: for a pass tensor,
// bytes of a segment from its planned offset; for a state tensor (Backend.NewTensor), a
// buffer of its own. A view (Reshape, Rows) is bytes [off, off+4n) of its root.
type tensor struct {
	shape []int
	n     int
	root  *tensor
	off   int64 // a view's byte offset in its root

	ctx *context // the pass of a pass tensor; nil for state tensors

	// A pass root's plan: the segment and offset of its bytes, size bytes; host is an
	// Input's data, uploaded when the pass is encoded.
	seg        int
	soff, size int64
	host       []float32
	// Lifetime in the pass: last is the index of the last operation reading the root,
	// used whether anything consumes the tensor (an operation, or a view for a root),
	// keep whether the root is an output, planned whether a Compute placed it, released
	// whether its bytes went to later tensors.
	last                          int
	used, keep, planned, released bool
	// A state tensor's buffer; freed after Backend.Release.
	buf   device.Buffer
	freed bool
}

func (t *tensor) Shape() []int { return t.shape }

// bytes is the tensor's size on the device.
func (t *tensor) bytes() int64 { return 4 * int64(t.n) }

func (b *Backend) NewContext() ml.Context { return &context{b: b} }

// out makes the output tensor of an operation being recorded.
func (c *context) out(shape ...int) *tensor {
	t := &tensor{shape: shape, n: ml.Numel(shape), ctx: c}
	t.root = t
	return t
}

// view makes a tensor of x's bytes from byte off.
func (c *context) view(x *tensor, off int64, shape ...int) *tensor {
	v := &tensor{shape: shape, n: ml.Numel(shape), root: x.root, off: x.off + off, ctx: x.ctx}
	if x.ctx == c {
		x.used = true // read through the view from now on
		c.made = append(c.made, v)
	}
	return v
}

// record queues an operation. Inputs released before (state tensors freed with
// Backend.Release) or from another pass are refused here, where the graph that misuses them
// is on the stack.
func (c *context) record(name string, inPlace bool, encode func(e *encoder), outs []*tensor, ins ...*tensor) {
	for _, t := range ins {
		if t.root.freed {
			panic(fmt.Sprintf("metalkit: %s of a released tensor %v", name, t.shape))
		}
		if t.ctx != nil && t.ctx != c {
			panic(fmt.Sprintf("metalkit: %s of a tensor %v from another pass", name, t.shape))
		}
	}
	c.made = append(c.made, outs...)
	c.ops = append(c.ops, op{name: name, ins: ins, outs: outs, inPlace: inPlace, encode: encode})
}

// region is where a tensor's bytes are on the device (after its Compute planned it).
func (c *context) region(t *tensor) Region {
	r := t.root
	if r.ctx == nil {
		return Region{Buf: r.buf, Off: t.off, Len: t.bytes()}
	}
	return Region{Buf: c.segs[r.seg].buf, Off: r.soff + t.off, Len: t.bytes()}
}

func (c *context) fail(err error) error {
	c.err = err
	return err
}

// Compute plans, encodes and runs the operations issued since the last Compute.
func (c *context) Compute() error {
	if c.err != nil {
		return c.err
	}
	first := c.next
	if first == len(c.ops) {
		return nil
	}
	if c.b.FusedTail {
		c.fuseTails(first)
	}
	// Last uses of the new operations' inputs, and which tensors nothing consumes.
	for i := first; i < len(c.ops); i++ {
		for _, t := range c.ops[i].ins {
			t.used = true
			r := t.root
			if r.ctx != c {
				continue
			}
			if r.planned && (r.released || !r.keep) {
				return c.fail(fmt.Errorf("metalkit: %s uses an intermediate %v whose bytes an earlier Compute gave to later tensors", c.ops[i].name, t.shape))
			}
			r.last = i
		}
	}
	for _, t := range c.made[c.seen:] {
		if !t.used {
			t.root.keep = true // an output: it may be read
		}
	}
	c.seen = len(c.made)
	if err := c.plan(first); err != nil {
		return c.fail(err)
	}
	e := &encoder{dev: c.b.dev, cmd: c.b.dev.NewCommands()}
	defer c.doneExperts()
	e.sync = func() {
		if e.err != nil {
			return
		}
		e.cmd.Commit()
		err := e.cmd.Wait()
		e.cmd = c.b.dev.NewCommands()
		if err != nil {
			e.err = fmt.Errorf("forward pass before a routing read-back: %w", err)
			return
		}
		if c.cacheHeld {
			c.b.experts.release()
		}
	}
	for i := first; i < len(c.ops); i++ {
		for _, t := range c.ops[i].outs {
			if t.host != nil && e.err == nil {
				// Inputs are placed live from the start of the segment, so no earlier
				// dispatch of this list writes where they are uploaded.
				r := c.region(t)
				if err := r.Buf.Write(r.Off, floatBytes(t.host)); err != nil {
					e.err = fmt.Errorf("metalkit: upload of %s %v: %w", c.ops[i].name, t.shape, err)
				}
			}
		}
		if c.ops[i].encode != nil {
			c.ops[i].encode(e)
		}
		if e.err != nil {
			c.next = len(c.ops)
			// Abandon the list (Wait without Commit) so that the device frees what the
			// pass holds and runs no more of it.
			e.cmd.Wait()
			return c.fail(fmt.Errorf("metalkit: %s: %w", c.ops[i].name, e.err))
		}
	}
	c.next = len(c.ops)
	c.rope, c.iotas, c.tables = nil, nil, nil
	e.cmd.Commit()
	if err := e.cmd.Wait(); err != nil {
		return c.fail(fmt.Errorf("metalkit: forward pass: %w", err))
	}
	named := c.named
	c.named = nil
	for _, n := range named {
		v, err := c.Read(n.t)
		if err != nil {
			return c.fail(fmt.Errorf("metalkit: hook of %s: %w", n.name, err))
		}
		c.b.Hook(n.name, n.layer, n.t.shape, v)
	}
	return nil
}

// plan places the outputs of operations [first, len(c.ops)) in a new segment: first fit by
// offset among the intervals of the tensors live at each operation, each tensor live from
// its operation (Inputs from the segment's start) to its last reader (outputs to the end).
func (c *context) plan(first int) error {
	seg := len(c.segs)
	var live []*tensor // placed tensors holding bytes now, by offset
	var high int64
	place := func(t *tensor) {
		size := (t.bytes() + scratchAlign - 1) / scratchAlign * scratchAlign
		off := int64(0)
		at := len(live)
		for i, u := range live {
			if u.soff-off >= size {
				at = i
				break
			}
			off = u.soff + u.size
		}
		t.seg, t.soff, t.size, t.planned = seg, off, size, true
		live = slices.Insert(live, at, t)
		high = max(high, off+size)
	}
	drop := func(t *tensor) {
		if i := slices.Index(live, t); i >= 0 {
			live = slices.Delete(live, i, i+1)
		}
		t.released = true
	}
	// Inputs first: their bytes are written before any dispatch runs.
	for i := first; i < len(c.ops); i++ {
		for _, t := range c.ops[i].outs {
			if t.host != nil {
				place(t)
			}
		}
	}
	for i := first; i < len(c.ops); i++ {
		o := &c.ops[i]
		for _, t := range o.outs {
			if t.planned {
				continue
			}
			if o.inPlace {
				if r := c.dying(o, i, t); r != nil {
					// t takes r's interval: r is read by the same threads before they write.
					j := slices.Index(live, r)
					t.seg, t.soff, t.size, t.planned = seg, r.soff, r.size, true
					live[j] = t
					r.released = true
					continue
				}
			}
			place(t)
		}
		if o.temp != nil {
			place(o.temp)
			drop(o.temp)
		}
		for _, t := range o.ins {
			if r := t.root; r.ctx == c && r.seg == seg && r.planned && r.last == i && !r.keep && !r.released {
				drop(r)
			}
		}
	}
	if high == 0 {
		c.segs = append(c.segs, segment{})
		return nil
	}
	buf, err := c.b.takeScratch(high)
	if err != nil {
		return fmt.Errorf("metalkit: scratch of %d bytes: %w", high, err)
	}
	c.segs = append(c.segs, segment{buf: buf, need: high})
	return nil
}

// dying returns an input root of element-wise operation o (the i-th) that dies at o and
// whose bytes out may take: every input on that root must cover exactly out's elements.
func (c *context) dying(o *op, i int, out *tensor) *tensor {
	seg := len(c.segs)
	for _, t := range o.ins {
		r := t.root
		if r.ctx != c || r.seg != seg || !r.planned || r.last != i || r.keep || r.released || r.host != nil || r.size < out.bytes() {
			continue
		}
		ok := true
		for _, u := range o.ins {
			if u.root == r && (u.off != 0 || u.n != out.n) {
				ok = false
			}
		}
		if ok {
			return r
		}
	}
	return nil
}

// Read copies a tensor to the host after the Compute that ran it.
func (c *context) Read(x ml.Tensor) ([]float32, error) {
	t := x.(*tensor)
	if c.err != nil {
		return nil, c.err
	}
	r := t.root
	switch {
	case r.freed:
		return nil, errors.New("metalkit: read of a released tensor")
	case r.ctx != nil && r.ctx != c:
		return nil, errors.New("metalkit: read of a tensor from another pass")
	case r.ctx == c && !r.planned:
		return nil, fmt.Errorf("metalkit: read of a tensor %v before Compute ran it", t.shape)
	case r.ctx == c && (r.released || !r.keep):
		return nil, fmt.Errorf("metalkit: read of an intermediate %v: operations of the pass consume it, so its memory was reused", t.shape)
	}
	v := make([]float32, t.n)
	reg := c.region(t)
	if err := reg.Buf.Read(reg.Off, floatBytes(v)); err != nil {
		return nil, fmt.Errorf("metalkit: read of %v: %w", t.shape, err)
	}
	return v, nil
}

// Close gives the pass's scratch back to the backend.
func (c *context) Close() {
	for _, s := range c.segs {
		if s.buf != nil {
			c.b.putScratch(s.buf, s.need)
		}
	}
	c.segs, c.ops, c.made, c.rope, c.iotas, c.named, c.routes = nil, nil, nil, nil, nil, nil, nil
	c.next, c.seen = 0, 0
	if c.err == nil {
		c.err = errClosed
	}
}

var errClosed = errors.New("metalkit: context is closed")
