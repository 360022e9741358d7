package daemon

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/redlite/batch/jobs"
)

// progressWriter publishes one job's progress into its task (a taskWriter) without making the
// engine wait for Redis: the engine's callbacks store the latest state and return at once; a
// goroutine writes it, the first time at once and then at most every interval. A slow or
// unreachable Redis thus slows the progress display, never the job. Streamed text does not
// wait for it: it goes through the job's text stream (textstream.go).
type progressWriter struct {
	w        io.Writer // the task's result field
	interval time.Duration
	log      *slog.Logger
	m        *metrics

	mu    sync.Mutex
	cur   jobs.Progress
	dirty bool

	wake     chan struct{}
	quit     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func newProgressWriter(w io.Writer, interval time.Duration, log *slog.Logger, m *metrics) *progressWriter {
	return &progressWriter{w: w, interval: interval, log: log, m: m,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

func (p *progressWriter) start() { go p.loop() }

// terminate stops the writer without a last write: the caller writes the result next, and a
// progress write landing after it would hide it. It may be called more than once.
func (p *progressWriter) terminate() {
	p.stopOnce.Do(func() { close(p.quit) })
	<-p.done
}

// update changes the progress and schedules a write.
func (p *progressWriter) update(f func(*jobs.Progress)) {
	p.mu.Lock()
	f(&p.cur)
	p.cur.UpdatedAt = time.Now().UTC()
	p.dirty = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// snapshot returns the current progress.
func (p *progressWriter) snapshot() jobs.Progress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

func (p *progressWriter) loop() {
	defer close(p.done)
	var last time.Time
	for {
		select {
		case <-p.quit:
			return
		case <-p.wake:
		}
		if wait := p.interval - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-p.quit:
				t.Stop()
				return
			case <-t.C:
			}
		}
		p.mu.Lock()
		cur, dirty := p.cur, p.dirty
		p.dirty = false
		p.mu.Unlock()
		if !dirty {
			continue
		}
		last = time.Now()
		if _, err := p.w.Write(jobs.EncodeProgress(cur)); err != nil {
			// Redis away or the task context ended: the next update tries again.
			p.m.progressWrites.WithLabelValues("error").Inc()
			if err != context.Canceled && err != context.DeadlineExceeded {
				p.log.Debug("progress write failed", "err", err)
			}
			continue
		}
		p.m.progressWrites.WithLabelValues("ok").Inc()
	}
}
