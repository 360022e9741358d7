package cpu

import (
	"runtime"
	"sync"
)

// pool runs data-parallel loops on a fixed number of goroutines.
type pool struct {
	threads int
}

func newPool(threads int) *pool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return &pool{threads: threads}
}

// parallel calls fn over [0, n) split into at most threads contiguous ranges of at least
// grain items each. Small loops run on the calling goroutine: a goroutine hand-off costs about
// a microsecond, more than a short loop body.
func (p *pool) parallel(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	parts := min(p.threads, (n+grain-1)/grain)
	if parts <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	step := (n + parts - 1) / parts
	for lo := step; lo < n; lo += step {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, min(lo+step, n))
	}
	fn(0, min(step, n))
	wg.Wait()
}
