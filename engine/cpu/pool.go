package cpu

import (
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlite/batch/engine/ml"
)

// pool runs data-parallel loops on up to threads goroutines: the caller and threads−1
// helpers. A loop is cut into more chunks than threads and the chunks are taken from a
// counter, so a core slowed down by other work on the machine takes fewer chunks instead of
// holding everyone back.
//
// Helpers are long-lived goroutines shared by every pool. Between loops they spin for a
// while on posted, the loop most recently started, and then park. Spinning matters: a decode
// step runs a few hundred loops of tens of microseconds each, and a goroutine woken through
// the scheduler is first queued on the waker's own processor, where it waits to be stolen;
// a spinning helper is already running on another one. The caller, too, spins while the
// helpers finish their last chunks, for the same reason.
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

// spinFor is how long helpers look for a new loop, and callers for their loop's end, before
// they block; long enough to bridge the serial work between the loops of a forward pass.
const spinFor = 100 * time.Microsecond

// loop is one parallel call: chunks of step items of [0, n) handed out in order.
type loop struct {
	fn       func(lo, hi int)
	n, step  int
	chunks   int64
	seats    atomic.Int32  // helpers that may still join: the pool's threads bound the loop
	next     atomic.Int64  // chunks taken
	done     atomic.Int64  // chunks finished
	finished chan struct{} // closed with the last chunk
	// failed holds the first panic of a chunk. The chunks after it are skipped but still
	// counted done, so the caller's wait ends and it raises the panic on its own goroutine.
	failed atomic.Pointer[ml.PanicError]
}

// run takes chunks until none are left.
func (l *loop) run() {
	for {
		c := l.next.Add(1) - 1
		if c >= l.chunks {
			return
		}
		if l.failed.Load() == nil {
			lo := int(c) * l.step
			l.chunk(lo, min(lo+l.step, l.n))
		}
		if l.done.Add(1) == l.chunks {
			close(l.finished)
		}
	}
}

// chunk runs one chunk and records its panic instead of letting it unwind: on a helper
// goroutine nothing above would recover it and the process would die, and on the caller the
// helpers still running the loop's other chunks must be waited for first.
func (l *loop) chunk(lo, hi int) {
	defer func() {
		if v := recover(); v != nil {
			p, ok := v.(*ml.PanicError)
			if !ok { // a nested loop's panic is already wrapped, with the stack that matters
				p = &ml.PanicError{Value: v, Stack: debug.Stack()}
			}
			l.failed.CompareAndSwap(nil, p)
		}
	}()
	l.fn(lo, hi)
}

// open reports whether the loop has chunks left to take.
func (l *loop) open() bool { return l != nil && l.next.Load() < l.chunks }

// join takes a helper's seat at the loop if there is work and a seat left.
func (l *loop) join() bool { return l.open() && l.seats.Add(-1) >= 0 }

// wait returns when every chunk is finished.
func (l *loop) wait() {
	if runtime.GOMAXPROCS(0) < 2 {
		// The helpers need this processor to finish.
		<-l.finished
		return
	}
	start := time.Now()
	for i := 1; l.done.Load() < l.chunks; i++ {
		pause()
		if i%64 == 0 && time.Since(start) > spinFor {
			<-l.finished
			return
		}
	}
}

var (
	posted   atomic.Pointer[loop]
	helpers  atomic.Int32 // started
	parked   atomic.Int32 // blocked on wake
	spinners atomic.Int32 // in spin
	wake     = make(chan struct{}, 64)
	startMu  sync.Mutex
)

// helper runs posted loops forever.
func helper() {
	for {
		l := spin()
		if l == nil {
			parked.Add(1)
			// Look again after saying so: a loop posted in between found parked at 0 and did
			// not wake anyone.
			if l = posted.Load(); l == nil || !l.join() {
				<-wake
				parked.Add(-1)
				continue
			}
			parked.Add(-1)
		}
		l.run()
	}
}

// spin waits up to spinFor for a posted loop with chunks left. At most GOMAXPROCS−1 helpers
// spin at once, so that spinning never takes the processor a caller needs.
func spin() *loop {
	defer spinners.Add(-1)
	if int(spinners.Add(1)) > runtime.GOMAXPROCS(0)-1 {
		return nil
	}
	start := time.Now()
	for i := 1; ; i++ {
		if l := posted.Load(); l != nil && l.join() {
			return l
		}
		pause()
		if i%64 == 0 && time.Since(start) > spinFor {
			return nil
		}
	}
}

// ensureHelpers starts helpers until there are n.
func ensureHelpers(n int) {
	if int(helpers.Load()) >= n {
		return
	}
	startMu.Lock()
	defer startMu.Unlock()
	for int(helpers.Load()) < n {
		helpers.Add(1)
		go helper()
	}
}

// parallel calls fn over [0, n) split into contiguous ranges of at least grain items each.
// Small loops run on the calling goroutine: handing work over costs more than a short loop
// body. fn may itself call parallel; the inner loop then gets whichever helpers are free.
//
// If fn panics, on any goroutine, the loop's other chunks are skipped and parallel panics on
// the calling goroutine with a *ml.PanicError once no chunk is running any more: the caller's
// recover (the context's Compute, the daemon's handler) sees it, and no helper dies.
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
	ensureHelpers(p.threads - 1)
	chunks := min(parts*chunksPerThread, (n+grain-1)/grain)
	step := (n + chunks - 1) / chunks
	l := &loop{fn: fn, n: n, step: step, chunks: int64((n + step - 1) / step), finished: make(chan struct{})}
	l.seats.Store(int32(parts - 1))
	posted.Store(l)
	for i := 0; i < parts-1 && parked.Load() > 0; i++ {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	l.run()
	l.wait()
	// Unpost the loop so that its closure, and what it holds, can be collected.
	posted.CompareAndSwap(l, nil)
	if f := l.failed.Load(); f != nil {
		panic(f)
	}
}

// scratch recycles float32 buffers between operations, so that a forward pass does not
// allocate (and the runtime does not zero) megabytes per matrix product.
type scratch struct {
	mu   sync.Mutex
	free [][]float32
	// meter, when set, counts the buffers in use in the backend's peak. The ones kept for
	// later (at most maxScratch) are not counted: which ones are kept depends on how the
	// loops happened to be scheduled, and a measure that changes from run to run cannot be
	// fitted.
	meter *arena
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
		s.count(cap(b))
		return b[:n]
	}
	s.mu.Unlock()
	s.count(n)
	return make([]float32, n)
}

func (s *scratch) count(floats int) {
	if s.meter != nil {
		s.meter.track(floats)
	}
}

// reset drops the kept buffers.
func (s *scratch) reset() {
	s.mu.Lock()
	s.free = nil
	s.mu.Unlock()
}

// put returns a buffer from get.
func (s *scratch) put(b []float32) {
	s.count(-cap(b))
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
