package cpu

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestPoolParallel checks that every index is visited exactly once, including from nested
// loops and from pools used concurrently, and that no loop uses more threads than its pool.
func TestPoolParallel(t *testing.T) {
	for _, threads := range []int{1, 2, 3} {
		p := newPool(threads)
		for _, n := range []int{0, 1, 7, 100, 1000} {
			for _, grain := range []int{0, 1, 13} {
				hits := make([]atomic.Int32, n)
				var active, peak atomic.Int32
				p.parallel(n, grain, func(lo, hi int) {
					a := active.Add(1)
					for {
						old := peak.Load()
						if a <= old || peak.CompareAndSwap(old, a) {
							break
						}
					}
					for i := lo; i < hi; i++ {
						hits[i].Add(1)
					}
					active.Add(-1)
				})
				for i := range hits {
					if h := hits[i].Load(); h != 1 {
						t.Fatalf("threads %d, n %d, grain %d: index %d visited %d times", threads, n, grain, i, h)
					}
				}
				if int(peak.Load()) > threads {
					t.Fatalf("threads %d: %d chunks ran at once", threads, peak.Load())
				}
			}
		}
	}

	t.Run("NestedAndConcurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := newPool(2)
				var sum atomic.Int64
				for range 50 {
					p.parallel(10, 1, func(lo, hi int) {
						for i := lo; i < hi; i++ {
							p.parallel(100, 1, func(lo, hi int) {
								for j := lo; j < hi; j++ {
									sum.Add(int64(i*100 + j))
								}
							})
						}
					})
				}
				if want := int64(50 * 999 * 1000 / 2); sum.Load() != want {
					t.Errorf("nested sum %d, want %d", sum.Load(), want)
				}
			}()
		}
		wg.Wait()
	})
}

func TestScratch(t *testing.T) {
	var s scratch
	a := s.get(100)
	if len(a) != 100 {
		t.Fatalf("len %d", len(a))
	}
	s.put(a)
	if b := s.get(50); &b[0] != &a[0] || len(b) != 50 {
		t.Fatal("a returned buffer large enough was not reused")
	}
	if c := s.get(1000); len(c) != 1000 {
		t.Fatalf("len %d", len(c))
	}
}
