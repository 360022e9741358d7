package metalkit

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/metalkit/device"
)

// The bounded expert cache (ml.ExpertResidency). With every expert resident the expert
// kernels read the mapped GGUF in place and a pass routes on the GPU without the host. With a
// cache, the routed experts' slices — one expert's matrix of one weight — live in one device
// buffer of fixed-size slots (the arena), filled from the mapped file on a miss:
//
//   - The host must know a layer's routing before it encodes the layer's expert products,
//     so the pass's command list is committed and waited for at the first expert product of
//     each MoE layer, and the router's ids are read back (once per layer: gate, up and down
//     share them). Red Lite does the same on its bounded path (one GPU round trip per layer;
//     dev51 measured that this round trip, not the misses, bounds its decode on 24 GiB).
//   - A miss is copied by the host from the mapped file into the slot (Buffer.Write: a
//     memcpy into shared memory on a Mac), while the GPU is idle at that wait. The expert
//     windows of the file are then never bound to a dispatch, so Metal never has to make the
//     whole file resident, which is what a cache is for.
//   - The expert kernels read through a slot table (expert id → slot, setBytes: 2 KiB for
//     512 experts) made per dispatch, so a hit costs the host a table entry and nothing on
//     the GPU.
//   - Slots read by dispatches not yet waited for are pinned (slots.go): a copy never lands
//     in a slot the GPU may still read. When a product's experts outnumber the unpinned
//     slots the list is waited for first; when they outnumber the arena, the product runs in
//     rounds of tokens and slots (planRounds), each round's outputs written by its own
//     dispatch (the fused sum continuing where the previous round left it).
//
// The arithmetic is the kernels' own whatever the cache holds: outputs are bit-identical to
// full residency (TestExpertCacheForward).

// maxTableExperts is the most experts a slot table holds: setBytes takes at most 4 KiB.
const maxTableExperts = 1024

// expertCache is a Backend's cache. Passes that go through it are serialised: one pass at a
// time holds pass from its first product through the cache to the end of its Compute, since
// its pins live until its list is waited for.
type expertCache struct {
	pass sync.Mutex
	mu   sync.Mutex
	// capacity is the bytes SetExpertCache allows; 0: every expert resident.
	capacity int64
	policy   slotPolicy
	// The expert weights bound (sliceKey.weight indexes them), the largest slice among them
	// (a slot's size) and how many slices they have in all (the most slots worth making).
	weights []*weight
	largest int64
	slices  int64
	// The arena, made at the first product through the cache (after the weights are bound).
	buf       device.Buffer
	slotBytes int64
	slots     *expertSlots
}

// bind registers an expert weight (host and slice set) and numbers it.
func (a *expertCache) bind(w *weight) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.largest = max(a.largest, w.slice)
	a.slices += int64(w.dims[2])
	w.expert = len(a.weights)
	a.weights = append(a.weights, w)
}

// SetExpertCache bounds the routed-expert slices held to bytes in one arena of slots the
// size of the largest slice (at least one slot); 0 keeps every expert resident. It waits for
// a pass using the cache to finish, and drops what the cache held.
func (b *Backend) SetExpertCache(bytes int64) error {
	if bytes < 0 {
		return fmt.Errorf("metalkit: expert cache of %d bytes", bytes)
	}
	a := &b.experts
	a.pass.Lock()
	defer a.pass.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.buf != nil {
		a.buf.Release()
	}
	a.buf, a.slots, a.slotBytes, a.capacity = nil, nil, 0, bytes
	return nil
}

// ExpertStats reports the cache's counters since SetExpertCache. With every expert resident
// the GPU routes alone and nothing is counted.
func (b *Backend) ExpertStats() ml.ExpertStats {
	a := &b.experts
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.slots == nil {
		return ml.ExpertStats{Capacity: a.capacity}
	}
	return a.slots.stats
}

// bounded reports whether products go through the cache.
func (a *expertCache) bounded() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.capacity > 0
}

// arena makes the arena on first use: as many slots of the largest slice (rounded to
// scratchAlign) as the capacity holds, at least one, at most one per slice of the model and
// what one device buffer can be.
func (a *expertCache) arena(dev device.Device) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.buf != nil {
		return nil
	}
	if a.largest == 0 {
		return fmt.Errorf("metalkit: expert cache used before any expert weight was bound")
	}
	size := (a.largest + scratchAlign - 1) / scratchAlign * scratchAlign
	n := min(max(a.capacity/size, 1), a.slices, dev.MaxBufferLength()/size)
	buf, err := dev.NewBuffer(n * size)
	if err != nil {
		return fmt.Errorf("metalkit: expert cache of %d slots of %d bytes: %w", n, size, err)
	}
	a.buf, a.slotBytes = buf, size
	a.slots = newExpertSlots(int(n), a.policy, a.capacity)
	return nil
}

// release unpins the slots: the list that read them has run.
func (a *expertCache) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.slots != nil {
		a.slots.release()
	}
}

// expertRound says where an expert product reads its experts — the weight in place, or the
// arena's slots through where — and which of its (token, slot) pairs it computes.
type expertRound struct {
	cached    bool
	where     []int32 // expert → slot of the arena, -1: not held (cached only)
	slotBytes int64
	t0, t1    int   // tokens [t0, t1)
	s0, s1    int   // slots [s0, s1) of each token
	experts   []int // the experts the pairs route to, ascending (cached only)
}

// allPairs is a product of n tokens by k slots in place, in one dispatch.
func allPairs(n, k int) expertRound { return expertRound{t1: n, s1: k} }

// noTable is what a product in place binds at the slot table's index.
var noTable = [][]byte{make([]byte, 4)}

// table is the slot table's bytes for setBytes.
func (r expertRound) table() [][]byte {
	if !r.cached {
		return noTable
	}
	b := make([]byte, 4*len(r.where))
	for i, v := range r.where {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return [][]byte{b}
}

// planRounds cuts the pairs of ids [n, k] into rounds that route to at most slots distinct
// experts each: all pairs when they fit, else halves of the tokens, then of a token's slots,
// in order (a token's slots in ascending rounds, as the fused sum adds them).
func planRounds(ids []float32, n, k, experts, slots int) []expertRound {
	var out []expertRound
	seen := make([]bool, experts)
	var cut func(t0, t1, s0, s1 int)
	cut = func(t0, t1, s0, s1 int) {
		clear(seen)
		var need []int
		for t := t0; t < t1; t++ {
			for s := s0; s < s1; s++ {
				v := ids[t*k+s]
				e := int(v)
				if v >= 0 && e < experts && float32(e) == v && !seen[e] {
					seen[e] = true
					need = append(need, e)
				}
			}
		}
		switch {
		case len(need) <= slots || (t1-t0 == 1 && s1-s0 == 1):
			slices.Sort(need)
			out = append(out, expertRound{t0: t0, t1: t1, s0: s0, s1: s1, experts: need})
		case t1-t0 > 1:
			m := (t0 + t1) / 2
			cut(t0, m, s0, s1)
			cut(m, t1, s0, s1)
		default:
			m := (s0 + s1) / 2
			cut(t0, t1, s0, m)
			cut(t0, t1, m, s1)
		}
	}
	cut(0, n, 0, k)
	return out
}

// encodeExperts encodes an expert product m, or m fused with the weighted sum s: in place
// with every expert resident, else through the cache.
func (c *context) encodeExperts(e *encoder, m *expertsCall, s *sumCall) {
	run := func(w Region, r expertRound) {
		if s == nil {
			e.matMulExperts(m.w.typ, w, m.experts, m.rows, m.cols, c.region(m.x), m.perSlot, c.region(m.ids), m.k, c.region(m.out), m.n, r)
			return
		}
		e.matMulExpertsSum(m.w.typ, w, m.experts, m.rows, m.cols, c.region(m.x), m.perSlot,
			c.region(m.ids), m.k, c.region(s.w), c.region(s.out), m.n, r)
	}
	a := &c.b.experts
	// A stack small enough to be held as float32 vectors (tests' toys) stays in place.
	if !a.bounded() || m.w.host == nil {
		run(m.w.raw, allPairs(m.n, m.k))
		return
	}
	if m.experts > maxTableExperts {
		e.err = fmt.Errorf("metalkit: %s has %d experts; the expert cache's slot table holds %d", m.w.name, m.experts, maxTableExperts)
		return
	}
	if !c.cacheHeld {
		a.pass.Lock()
		c.cacheHeld = true
	}
	if err := a.arena(c.b.dev); err != nil {
		e.err = err
		return
	}
	ids := c.routing(e, m.ids)
	if e.err != nil {
		return
	}
	for _, r := range planRounds(ids, m.n, m.k, m.experts, a.slots.n) {
		c.fill(e, m.w, &r)
		if e.err != nil {
			return
		}
		run(Region{Buf: a.buf, Len: a.buf.Len()}, r)
	}
}

// routing returns the router's ids as the host reads them: at the first product of a layer
// the list so far is committed and waited for (the command buffer splits at the MoE layer),
// the products that follow on the same ids reuse them.
func (c *context) routing(e *encoder, ids *tensor) []float32 {
	if v, ok := c.routes[ids]; ok {
		return v
	}
	e.sync()
	if e.err != nil {
		return nil
	}
	v := make([]float32, ids.n)
	r := c.region(ids)
	if err := r.Buf.Read(r.Off, floatBytes(v)); err != nil {
		e.err = fmt.Errorf("metalkit: read of the routing: %w", err)
		return nil
	}
	if c.routes == nil {
		c.routes = map[*tensor][]float32{}
	}
	c.routes[ids] = v
	return v
}

// fill looks up round r's experts of w, copying the misses from the mapped file into their
// slots, and makes r cached with its slot table. When the experts not pinned already
// outnumber the unpinned slots, the list is waited for first.
func (c *context) fill(e *encoder, w *weight, r *expertRound) {
	a := &c.b.experts
	a.mu.Lock()
	if a.slots.needsWait(w.expert, r.experts) {
		a.mu.Unlock()
		e.sync()
		if e.err != nil {
			return
		}
		a.mu.Lock()
	}
	defer a.mu.Unlock()
	r.cached, r.slotBytes = true, a.slotBytes
	r.where = make([]int32, w.dims[2])
	for i := range r.where {
		r.where[i] = -1
	}
	for _, x := range r.experts {
		slot, miss := a.slots.lookup(sliceKey{w.expert, x}, w.slice)
		r.where[x] = slot
		if miss {
			if err := a.buf.Write(int64(slot)*a.slotBytes, w.host[int64(x)*w.slice:int64(x+1)*w.slice]); err != nil {
				e.err = fmt.Errorf("metalkit: copy of expert %d of %s into the expert cache: %w", x, w.name, err)
				return
			}
		}
	}
}

// doneExperts ends the pass's use of the cache: its list has run (or was abandoned).
func (c *context) doneExperts() {
	if !c.cacheHeld {
		return
	}
	c.b.experts.release()
	c.cacheHeld = false
	c.b.experts.pass.Unlock()
}

var _ ml.ExpertResidency = (*Backend)(nil)
