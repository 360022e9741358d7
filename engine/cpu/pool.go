package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// pool runs data-parallel loops on up to threads goroutines: the caller and threads−1
// helpers. Helpers are long-lived goroutines shared by every pool, parked on a channel
// between loops, so a loop costs a wake-up rather than a goroutine start. A loop is cut into
// more chunks than threads and the chunks are taken from a counter, so a core slowed down by
// other work on the machine takes fewer chunks instead of holding everyone back.
type pool struct {
	threads int
	scratch scratch
}

func newPool(threads int) *pool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return &pool{threads: threads}
}

// chunksPerThread is how many chunks each thread gets on average when a loop is long enough;
// a few per thread balance a noisy machine, more would only add counter traffic.
const chunksPerThread = 4

// loop is one parallel call: chunks of step items of [0, n) handed out in order.
type loop struct {
	fn      func(lo, hi int)
	n, step int
	chunks  int64
	next    atomic.Int64
	wg      sync.WaitGroup
}

// run takes chunks until none are left.
func (l *loop) run() {
	for {
		c := l.next.Add(1) - 1
		if c >= l.chunks {
			return
		}
		lo := int(c) * l.step
		l.fn(lo, min(lo+l.step, l.n))
		l.wg.Done()
	}
}

// idle hands loops to parked helpers. A send that finds no helper waiting starts a new one,
// so the number of helpers grows to the largest number ever busy at once, and no loop waits
// for a helper that is busy with another.
var idle = make(chan *loop)

func helper(l *loop) {
	for {
		l.run()
		l = <-idle
	}
}

// parallel calls fn over [0, n) split into contiguous ranges of at least grain items each.
// Small loops run on the calling goroutine: waking a helper costs microseconds, more than a
// short loop body. fn may itself call parallel.
func (p *pool) parallel(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	parts := min(p.threads, (n+grain-1)/grain)
	if parts <= 1 {
		fn(0, n)
		return
	}
	chunks := min(parts*chunksPerThread, (n+grain-1)/grain)
	step := (n + chunks - 1) / chunks
	l := &loop{fn: fn, n: n, step: step, chunks: int64((n + step - 1) / step)}
	l.wg.Add(int(l.chunks))
	for range parts - 1 {
		select {
		case idle <- l:
		default:
			go helper(l)
		}
	}
	l.run()
	l.wg.Wait()
}

// scratch recycles float32 buffers between operations, so that a forward pass does not
// allocate (and the runtime does not zero) megabytes per matrix product.
type scratch struct {
	mu   sync.Mutex
	free [][]float32
}

// maxScratch bounds the buffers kept; more are dropped to the garbage collector.
const maxScratch = 16

// get returns a buffer of n floats with arbitrary contents.
func (s *scratch) get(n int) []float32 {
	s.mu.Lock()
	best := -1
	for i, b := range s.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(s.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := s.free[best]
		s.free[best] = s.free[len(s.free)-1]
		s.free = s.free[:len(s.free)-1]
		s.mu.Unlock()
		return b[:n]
	}
	s.mu.Unlock()
	return make([]float32, n)
}

// put returns a buffer from get.
func (s *scratch) put(b []float32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.free) < maxScratch {
		s.free = append(s.free, b)
		return
	}
	// Keep the larger buffers: they are the ones that are expensive to make.
	small := 0
	for i, f := range s.free {
		if cap(f) < cap(s.free[small]) {
			small = i
		}
	}
	if cap(b) > cap(s.free[small]) {
		s.free[small] = b
	}
}
