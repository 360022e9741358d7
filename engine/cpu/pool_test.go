package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlite/batch/engine/ml"
)

// TestPoolParallel checks that every index is visited exactly once, including from nested
// loops and from pools used concurrently, and that no loop uses more threads than its pool.
func TestPoolParallel(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
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

// goid returns the current goroutine's id, read from its stack header ("goroutine 7 [...").
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	return f[1]
}

// TestPoolPanic checks that a panic in a loop body running on a helper goroutine reaches the
// goroutine that issued the loop as a *ml.PanicError carrying the value and the helper's stack,
// and that the helpers survive it.
func TestPoolPanic(t *testing.T) {
	p := newPool(2)
	t.Run("OnHelper", func(t *testing.T) {
		caller := goid()
		helperPanicked := make(chan struct{})
		var once sync.Once
		got := func() (v any) {
			defer func() { v = recover() }()
			p.parallel(64, 1, func(lo, hi int) {
				if goid() != caller {
					once.Do(func() { close(helperPanicked) })
					panic(fmt.Sprintf("poison at %d", lo))
				}
				// Keep the caller busy until a helper has taken (and failed) a chunk, so the
				// panic is certain to happen on a helper.
				select {
				case <-helperPanicked:
				case <-time.After(30 * time.Second):
					t.Error("no helper joined the loop")
				}
			})
			return nil
		}()
		lp, ok := got.(*ml.PanicError)
		if !ok {
			t.Fatalf("recovered %T %v, want *ml.PanicError", got, got)
		}
		if s, _ := lp.Value.(string); !strings.HasPrefix(s, "poison at ") {
			t.Errorf("panic value %q, want the loop body's", lp.Value)
		}
		if !strings.Contains(string(lp.Stack), "TestPoolPanic") {
			t.Errorf("stack does not show the panicking body:\n%s", lp.Stack)
		}
	})
	t.Run("Nested", func(t *testing.T) {
		got := func() (v any) {
			defer func() { v = recover() }()
			p.parallel(8, 1, func(lo, hi int) {
				p.parallel(8, 1, func(lo, hi int) {
					var ids []int
					_ = ids[lo] // index out of range: a runtime error
				})
			})
			return nil
		}()
		lp, ok := got.(*ml.PanicError)
		if !ok {
			t.Fatalf("recovered %T %v, want *ml.PanicError", got, got)
		}
		var re runtime.Error
		if !errors.As(lp, &re) {
			t.Errorf("%v does not unwrap to the runtime error", lp)
		}
	})
	t.Run("PoolStillWorks", func(t *testing.T) {
		for range 20 {
			var sum atomic.Int64
			p.parallel(1000, 1, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					sum.Add(int64(i))
				}
			})
			if sum.Load() != 999*1000/2 {
				t.Fatalf("sum %d after a panicked loop", sum.Load())
			}
		}
	})
}
