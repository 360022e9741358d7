package daemon

import (
	"sync"
	"time"
)

// throttle runs a job's writer (progress.go, textstream.go) on a goroutine of its own, so
// that the engine never waits for Redis: kick asks for a write, which flush makes at once,
// or when interval has passed since the last one, whatever came meanwhile in one write.
type throttle struct {
	interval time.Duration
	// flush writes what is pending and says whether there was anything: an empty flush
	// does not start an interval.
	flush func() bool

	wake     chan struct{}
	quit     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func newThrottle(interval time.Duration, flush func() bool) *throttle {
	return &throttle{interval: interval, flush: flush,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

func (t *throttle) start() { go t.loop() }

// kick asks for a write; it never blocks.
func (t *throttle) kick() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// terminate stops the goroutine without a last flush, after the flush under way if any. It
// may be called more than once.
func (t *throttle) terminate() {
	t.stopOnce.Do(func() { close(t.quit) })
	<-t.done
}

func (t *throttle) loop() {
	defer close(t.done)
	var last time.Time
	for {
		select {
		case <-t.quit:
			return
		case <-t.wake:
		}
		if wait := t.interval - time.Since(last); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-t.quit:
				timer.Stop()
				return
			case <-timer.C:
			}
		}
		if now := time.Now(); t.flush() {
			last = now
		}
	}
}
