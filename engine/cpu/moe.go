package cpu

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// Mixture-of-experts operations: routing, the per-expert matrix products, and the cache
// that decides where an expert's bytes are read from.

func (c *context) Route(logits ml.Tensor, k int, norm bool) (ml.Tensor, ml.Tensor) {
	t := logits.(*tensor)
	n, experts := t.rows2()
	if k <= 0 || k > experts {
		panic(fmt.Sprintf("cpu: route %d of %d experts", k, experts))
	}
	ids, weights := c.out(n, k), c.out(n, k)
	c.record("route", false, func() {
		c.b.pool.parallel(n, 16, func(lo, hi int) {
			p := make([]float32, experts)
			for i := lo; i < hi; i++ {
				softmax(p, t.data[i*experts:(i+1)*experts])
				id, w := ids.data[i*k:(i+1)*k], weights.data[i*k:(i+1)*k]
				// k passes of selection: k is a handful, experts at most a few hundred. A
				// NaN probability (NaN or infinite logits) ranks below every number, so that
				// a row of them still chooses k distinct experts (k ≤ experts), with NaN
				// weights, as the Metal kernel does.
				var sum float64
				for j := range id {
					best := -1
					for e, v := range p {
						if v != taken && (best < 0 || routeRank(v) > routeRank(p[best])) {
							best = e
						}
					}
					id[j], w[j] = float32(best), p[best]
					sum += float64(p[best])
					p[best] = taken
				}
				if norm {
					s := max(float32(sum), ml.MinRouteWeightSum)
					for j := range w {
						w[j] /= s
					}
				}
			}
		})
	}, []*tensor{ids, weights}, t)
	return ids, weights
}

// taken marks an expert already chosen: probabilities are ≥ 0 (or NaN).
const taken = -1

// routeRank is what selection compares: the probability, or −0.5 for NaN (below every
// probability, above taken).
func routeRank(v float32) float32 {
	if v != v {
		return -0.5
	}
	return v
}

// softmax writes the softmax of x to p: exponentials in float32 after subtracting the
// maximum, their sum in float64, then one scale, as ggml computes it.
func softmax(p, x []float32) {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	var sum float64
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		p[i] = e
		sum += float64(e)
	}
	s := float32(1 / sum)
	for i := range p {
		p[i] *= s
	}
}

func (c *context) MatMulExperts(wt ml.Weight, x, ids ml.Tensor) ml.Tensor {
	w := wt.(*weight)
	xt, it := x.(*tensor), ids.(*tensor)
	if len(w.dims) != 3 || len(it.shape) != 2 {
		panic(fmt.Sprintf("cpu: expert product of %s %v with ids %v", w.name, w.dims, it.shape))
	}
	cols, rows := w.dims[0], w.dims[1]
	n, k := it.shape[0], it.shape[1]
	shared := len(xt.shape) == 2
	if !(shared && xt.shape[0] == n && xt.shape[1] == cols) &&
		!(len(xt.shape) == 3 && xt.shape[0] == n && xt.shape[1] == k && xt.shape[2] == cols) {
		panic(fmt.Sprintf("cpu: expert product of %s %v with x %v and ids %v", w.name, w.dims, xt.shape, it.shape))
	}
	out := c.out(n, k, rows)
	c.record("matmul experts", false, func() { c.matMulExperts(w, xt, it, out) }, []*tensor{out}, xt, it)
	return out
}

// matMulExperts runs MatMulExperts: the (token, slot) pairs grouped by expert, each
// expert's rows multiplied by its pairs' inputs at once.
func (c *context) matMulExperts(w *weight, xt, it, out *tensor) {
	cols, rows, experts := w.dims[0], w.dims[1], w.dims[2]
	n, k := it.shape[0], it.shape[1]
	shared := len(xt.shape) == 2
	// Group the (token, slot) pairs by expert: a counting sort over the ids.
	start := make([]int, experts+1)
	for _, v := range it.data {
		e := int(v)
		if e < 0 || e >= experts || float32(e) != v {
			panic(fmt.Sprintf("cpu: expert id %v outside %s's %d experts", v, w.name, experts))
		}
		start[e+1]++
	}
	for e := 0; e < experts; e++ {
		start[e+1] += start[e]
	}
	order := make([]int, len(it.data))
	next := append([]int(nil), start[:experts]...)
	for p, v := range it.data {
		e := int(v)
		order[next[e]] = p
		next[e]++
	}
	xs := c.b.pool.scratch.get(n * k * cols)
	defer c.b.pool.scratch.put(xs)
	ys := c.b.pool.scratch.get(n * k * rows)
	defer c.b.pool.scratch.put(ys)
	if c.fewPairsPerExpert(w, start) {
		c.expertTiles(w, xt, shared, k, start, order, xs, ys, out)
		return
	}
	for e := 0; e < experts; e++ {
		pairs := order[start[e]:start[e+1]]
		if len(pairs) == 0 {
			continue
		}
		for r, p := range pairs {
			src := p * cols // x[i][j] with p = i·k + j
			if shared {
				src = p / k * cols
			}
			copy(xs[r*cols:(r+1)*cols], xt.data[src:src+cols])
		}
		data, packed, release := c.b.experts.get(w, e)
		v := expertView(w, e, data)
		v.packed = packed
		y := ys[:len(pairs)*rows]
		c.matmul(v, 0, rows, xs[:len(pairs)*cols], len(pairs), y)
		release()
		for r, p := range pairs {
			copy(out.data[p*rows:(p+1)*rows], y[r*rows:(r+1)*rows])
		}
	}
}

// fewPairsPerExpert reports whether every expert of a decode step (one token, or a few
// sequences' tokens) has few enough pairs to be dotted row by row: then all the layer's
// experts run in one parallel pass over tiles of rows (expertTiles) instead of one pass per
// expert, whose synchronisation would dominate. (A bounded cache that cannot hold all their
// slices at once reads the rest in place.)
func (c *context) fewPairsPerExpert(w *weight, start []int) bool {
	if w.f32 != nil || c.b.fusedMaxTokens(w.typ) == 1 {
		return false
	}
	for e := 0; e+1 < len(start); e++ {
		if start[e+1]-start[e] > c.b.fusedMaxTokens(w.typ) {
			return false
		}
	}
	return true
}

// expertTiles is matMulExperts for few pairs per expert: the pairs' inputs are gathered by
// expert, then one parallel pass dots every expert's tiles of rows with its pairs.
func (c *context) expertTiles(w *weight, xt *tensor, shared bool, k int, start, order []int, xs, ys []float32, out *tensor) {
	cols, rows, experts := w.dims[0], w.dims[1], w.dims[2]
	for r, p := range order {
		src := p * cols // x[i][j] with p = i·k + j
		if shared {
			src = p / k * cols
		}
		copy(xs[r*cols:(r+1)*cols], xt.data[src:src+cols])
	}
	type job struct{ e, t0, t1 int }
	var jobs []job
	data := make([][]byte, experts)
	packed := make([][]byte, experts)
	for e := 0; e < experts; e++ {
		if start[e+1] == start[e] {
			continue
		}
		var release func()
		data[e], packed[e], release = c.b.experts.get(w, e)
		defer release()
		for t0 := 0; t0 < rows; t0 += dotTileRows {
			jobs = append(jobs, job{e, t0, min(t0+dotTileRows, rows)})
		}
	}
	if c.b.int8(w.typ) && cols%quant.QK_K == 0 {
		// Every pair's input quantized once, then the same tiles with 8-bit activations.
		acts, release := c.quantizeActs(xs, len(order), cols)
		defer release()
		nb := cols / quant.QK_K
		c.b.pool.parallel(len(jobs), 4, func(lo, hi int) {
			for _, j := range jobs[lo:hi] {
				p0, np := start[j.e], start[j.e+1]-start[j.e]
				dotTileQ8K(w.typ, data[j.e][j.t0*w.rowB:j.t1*w.rowB], acts[p0*nb:(p0+np)*nb], nb, np, ys[p0*rows+j.t0:], rows)
			}
		})
	} else if w.typ == quant.Q8_0 && c.b.int8Q8_0() {
		acts, release := c.quantizeActsQ8_0(xs, len(order), cols)
		defer release()
		ab := cols / 32 * 34
		c.b.pool.parallel(len(jobs), 4, func(lo, hi int) {
			for _, j := range jobs[lo:hi] {
				p0, np := start[j.e], start[j.e+1]-start[j.e]
				if packed[j.e] != nil {
					quant.DotRepackedQ8_0(packed[j.e], cols, j.t0, j.t1, acts[p0*ab:(p0+np)*ab], ys[p0*rows+j.t0:], rows)
					continue
				}
				dotTileQ8_0(data[j.e][j.t0*w.rowB:j.t1*w.rowB], acts[p0*ab:(p0+np)*ab], np, ys[p0*rows+j.t0:], rows)
			}
		})
	} else {
		c.b.pool.parallel(len(jobs), 4, func(lo, hi int) {
			for _, j := range jobs[lo:hi] {
				p0, np := start[j.e], start[j.e+1]-start[j.e]
				dotTile(w.typ, data[j.e][j.t0*w.rowB:j.t1*w.rowB], xs[p0*cols:(p0+np)*cols], cols, np, ys[p0*rows+j.t0:], rows)
			}
		})
	}
	for r, p := range order {
		copy(out.data[p*rows:(p+1)*rows], ys[r*rows:(r+1)*rows])
	}
}

// expertView is expert e of w as a matrix over data, that expert's bytes.
func expertView(w *weight, e int, data []byte) *weight {
	cols, rows := w.dims[0], w.dims[1]
	v := &weight{name: fmt.Sprintf("%s[%d]", w.name, e), typ: w.typ, dims: []int{cols, rows}, data: data,
		rows: rows, cols: cols, rowB: w.rowB}
	if w.f32 != nil {
		v.f32 = w.f32[e*rows*cols : (e+1)*rows*cols]
	} else if w.typ == quant.F32 && uintptr(unsafe.Pointer(unsafe.SliceData(data)))%4 == 0 {
		v.f32 = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(data))), rows*cols)
	}
	return v
}

// expertCache holds expert slices — one expert's rows of one weight — copied from the
// weight's bytes. Its zero value keeps every expert resident: slices are read in place.
//
// A bounded cache keeps the policy in engine/ml (expertcache.go), Metal's too: each weight
// gets a share of the capacity in proportion to its expert bytes, and within a share the
// slices looked up most often lately stay. A slice that is not admitted — its weight's
// share is full of slices used at least as often — is read in place, as a miss. Slices in use are pinned: a product
// never reads a slice that another goroutine evicts, and the cache never exceeds its
// capacity.
type expertCache struct {
	mu       sync.Mutex
	capacity int64
	sets     map[*weight]*expertSet
	total    int64 // expert bytes of every weight looked up since SetExpertCache
	stats    ml.ExpertStats
	// hostWeights and mappedWeights are the backend's counts of bytes held for weights.
	hostWeights, mappedWeights *atomic.Int64
	// repacks reports whether a weight of this type and dims has its experts repacked
	// (Backend.repacksExperts).
	repacks func(quant.Type, []int) bool
	// repacked lists the 3-D weights whose experts were repacked at load, every expert
	// resident; a bounded cache lets their layouts go and holds its slices repacked.
	repacked []*weight
}

// unbounded reports whether every expert is resident.
func (c *expertCache) unbounded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.capacity == 0
}

// expertSet is one weight's share of the cache.
type expertSet struct {
	held   map[int]*expertEntry
	bytes  int64 // of the slices held
	total  int64 // of all the weight's experts
	counts ml.ExpertCounts
}

type expertEntry struct {
	data   []byte
	packed bool // data is the slice in quant's repacked layout
	pins   int
}

func (b *Backend) SetExpertCache(bytes int64) error {
	if bytes < 0 {
		return fmt.Errorf("cpu: expert cache of %d bytes", bytes)
	}
	c := &b.experts
	c.mu.Lock()
	defer c.mu.Unlock()
	if bytes > 0 {
		// The experts repacked at load go: the cache's entries hold repacked slices
		// within its capacity. (Back to unbounded, experts are read as the file stores
		// them, by kernels that give the same numbers.)
		for _, w := range c.repacked {
			c.hostWeights.Add(-int64(len(w.packed)))
			if w.packedMapped {
				c.mappedWeights.Add(-int64(len(w.packed)))
				dropHostBytes(w.packed)
			}
			w.packed, w.packedMapped = nil, false
		}
		c.repacked = nil
	}
	c.capacity = bytes
	c.sets = map[*weight]*expertSet{}
	c.total = 0
	c.stats = ml.ExpertStats{Capacity: bytes}
	return nil
}

func (b *Backend) ExpertStats() ml.ExpertStats {
	c := &b.experts
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// expertBytes is one expert's slice of w.
func (w *weight) expertBytes() int { return w.rows / w.dims[2] * w.rowB }

// get returns expert e's bytes of w, and where w's experts take the repacked kernels
// (repacksExperts) the slice in that layout, or nil where it is not held: the 8-bit
// kernels over either give the same numbers. release must be called when the product is
// done.
func (c *expertCache) get(w *weight, e int) (data, packed []byte, release func()) {
	size := w.expertBytes()
	direct := w.data[e*size : (e+1)*size]
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.capacity == 0 {
		c.stats.Hits++
		if w.packed == nil {
			return direct, nil, func() {}
		}
		return direct, w.packed[e*size : (e+1)*size], func() {}
	}
	s := c.set(w)
	s.counts.Look(e)
	if ent, ok := s.held[e]; ok {
		c.stats.Hits++
		ent.pins++
		if ent.packed {
			return direct, ent.data, c.unpin(ent)
		}
		return ent.data, nil, c.unpin(ent)
	}
	c.stats.Misses++
	buf, ok := c.admit(s, e, int64(size))
	if !ok {
		return direct, nil, func() {}
	}
	if buf == nil {
		buf = make([]byte, size)
	}
	ent := &expertEntry{data: buf, pins: 1}
	if c.repacks != nil && c.repacks(w.typ, w.dims) {
		quant.RepackInto(w.typ, buf, direct, w.rows/w.dims[2], w.cols)
		ent.packed = true
	} else {
		copy(buf, direct)
	}
	s.held[e] = ent
	s.bytes += int64(size)
	c.stats.Bytes += int64(size)
	if ent.packed {
		return direct, buf, c.unpin(ent)
	}
	return buf, nil, c.unpin(ent)
}

// set returns w's share, making it on w's first lookup. Called with mu held.
func (c *expertCache) set(w *weight) *expertSet {
	s, ok := c.sets[w]
	if !ok {
		s = &expertSet{held: map[int]*expertEntry{}, total: int64(w.expertBytes()) * int64(w.dims[2]), counts: ml.NewExpertCounts(w.dims[2])}
		c.sets[w] = s
		c.total += s.total
	}
	return s
}

// share is the bytes s may hold: the capacity in proportion to its experts' bytes among the
// weights seen so far.
func (c *expertCache) share(s *expertSet) int64 {
	return ml.ExpertShare(c.capacity, s.total, c.total)
}

// coldest is s's unpinned slice with the fewest recent lookups, -1 if none.
func (s *expertSet) coldest() int {
	best := -1
	for e, ent := range s.held {
		if ent.pins == 0 && (best < 0 || s.counts.Of(e) < s.counts.Of(best) || s.counts.Of(e) == s.counts.Of(best) && e < best) {
			best = e
		}
	}
	return best
}

// admit makes room for a slice of size bytes of expert e in s, evicting within s's share
// and then from shares grown beyond theirs (shares shrink as more weights are seen). It
// returns an evicted buffer of size bytes, if one came free, and whether e is admitted.
// Called with mu held.
func (c *expertCache) admit(s *expertSet, e int, size int64) ([]byte, bool) {
	var buf []byte
	evict := func(o *expertSet, v int) {
		ent := o.held[v]
		delete(o.held, v)
		o.bytes -= int64(len(ent.data))
		c.stats.Bytes -= int64(len(ent.data))
		c.stats.Evictions++
		if int64(len(ent.data)) == size {
			buf = ent.data
		}
	}
	for s.bytes+size > c.share(s) {
		v := s.coldest()
		if v < 0 || !s.counts.Admits(e, v) {
			return buf, false
		}
		evict(s, v)
	}
	for c.stats.Bytes+size > c.capacity {
		var over *expertSet
		for _, o := range c.sets {
			if o != s && o.bytes > c.share(o) && o.coldest() >= 0 && (over == nil || o.bytes-c.share(o) > over.bytes-c.share(over)) {
				over = o
			}
		}
		if over == nil {
			return buf, false
		}
		evict(over, over.coldest())
	}
	return buf, true
}

// unpin returns the release function of a lookup.
func (c *expertCache) unpin(ent *expertEntry) func() {
	return func() {
		c.mu.Lock()
		ent.pins--
		c.mu.Unlock()
	}
}
