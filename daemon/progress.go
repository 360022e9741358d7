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
	*throttle           // start, terminate
	w         io.Writer // the task's result field
	log       *slog.Logger
	m         *metrics

	mu    sync.Mutex
	cur   jobs.Progress
	dirty bool
}

func newProgressWriter(w io.Writer, interval time.Duration, log *slog.Logger, m *metrics) *progressWriter {
	p := &progressWriter{w: w, log: log, m: m}
	p.throttle = newThrottle(interval, p.flush)
	return p
}

// terminate stops the writer without a last write: the caller writes the result next, and a
// progress write landing after it would hide it. It may be called more than once.
func (p *progressWriter) terminate() { p.throttle.terminate() }

// update changes the progress and schedules a write.
func (p *progressWriter) update(f func(*jobs.Progress)) {
	p.mu.Lock()
	f(&p.cur)
	p.cur.UpdatedAt = time.Now().UTC()
	p.dirty = true
	p.mu.Unlock()
	p.kick()
}

// snapshot returns the current progress.
func (p *progressWriter) snapshot() jobs.Progress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// flush writes the progress if it changed since the last write.
func (p *progressWriter) flush() bool {
	p.mu.Lock()
	cur, dirty := p.cur, p.dirty
	p.dirty = false
	p.mu.Unlock()
	if !dirty {
		return false
	}
	if _, err := p.w.Write(jobs.EncodeProgress(cur)); err != nil {
		// Redis away or the task context ended: the next update tries again.
		p.m.progressWrites.WithLabelValues("error").Inc()
		if err != context.Canceled && err != context.DeadlineExceeded {
			p.log.Debug("progress write failed", "err", err)
		}
		return true
	}
	p.m.progressWrites.WithLabelValues("ok").Inc()
	return true
}
