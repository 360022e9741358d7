package daemon

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redlite/batch/jobs"
)

// textWriteTimeout bounds one append to a text stream: a reader falls back on the result,
// so a stuck Redis costs a stream its pieces, never the job its time.
const textWriteTimeout = 5 * time.Second

// textWriter appends one attempt's text to its job's text stream (jobs.Client.AppendText)
// without making the engine wait for Redis: push stores the token's text and returns; a
// goroutine writes it at once when the last write is a slice or more ago, or else when it
// is, with all the text that came meanwhile in one entry. A fast decode (tokens under a
// slice apart) thus costs Redis at most one round trip per slice per job, a slow one an
// entry per token. A zero slice writes an entry per token, several per round trip when
// they come faster than Redis answers.
type textWriter struct {
	*throttle // start, terminate
	client    *jobs.Client
	id        string
	attempt   int
	slice     time.Duration
	log       *slog.Logger
	m         *metrics

	mu              sync.Mutex
	pending         []jobs.TextPiece
	text, reasoning int // bytes pushed so far: the next piece's offsets
}

func newTextWriter(c *jobs.Client, id string, attempt int, slice time.Duration, log *slog.Logger, m *metrics) *textWriter {
	t := &textWriter{client: c, id: id, attempt: attempt, slice: slice, log: log, m: m}
	t.throttle = newThrottle(slice, t.flush)
	return t
}

// push adds the text one token released (either may be empty) with the tokens generated.
func (t *textWriter) push(answer, reasoning string, generated int) {
	if answer == "" && reasoning == "" {
		return
	}
	t.mu.Lock()
	p := jobs.TextPiece{Attempt: t.attempt, Text: answer, TextOffset: t.text, Reasoning: reasoning,
		ReasoningOffset: t.reasoning, Generated: generated}
	t.text += len(answer)
	t.reasoning += len(reasoning)
	if n := len(t.pending); n > 0 && t.slice > 0 {
		q := &t.pending[n-1] // one entry per slice
		q.Text += p.Text
		q.Reasoning += p.Reasoning
		q.Generated = p.Generated
	} else {
		t.pending = append(t.pending, p)
	}
	t.mu.Unlock()
	t.kick()
}

// end writes what is pending and the attempt's end entry, after the attempt wrote its
// result (reason is its finish reason), and stops the writer.
func (t *textWriter) end(reason jobs.FinishReason) {
	t.terminate()
	t.mu.Lock()
	pieces := append(t.pending, jobs.TextPiece{Attempt: t.attempt, End: reason})
	t.pending = nil
	t.mu.Unlock()
	t.write(pieces)
}

// terminate stops the writer, dropping what is pending: an attempt that ends without a
// result leaves its text to the next attempt. It may be called more than once.
func (t *textWriter) terminate() { t.throttle.terminate() }

// flush writes what is pending.
func (t *textWriter) flush() bool {
	t.mu.Lock()
	pieces := t.pending
	t.pending = nil
	t.mu.Unlock()
	if len(pieces) == 0 {
		return false
	}
	if !t.write(pieces) {
		// Kept for the next write, in order: a reader that missed them would have to wait
		// for the result for the rest of the text.
		t.mu.Lock()
		t.pending = append(pieces, t.pending...)
		t.mu.Unlock()
	}
	return true
}

func (t *textWriter) write(pieces []jobs.TextPiece) bool {
	// Not the task's context: the end entry of a cancelled job is written after it ended.
	ctx, cancel := context.WithTimeout(context.Background(), textWriteTimeout)
	defer cancel()
	if err := t.client.AppendText(ctx, t.id, pieces...); err != nil {
		// Redis away: the readers take the text from the result if it stays away.
		t.m.textWrites.WithLabelValues("error").Inc()
		t.log.Debug("text stream write failed", "err", err)
		return false
	}
	t.m.textWrites.WithLabelValues("ok").Inc()
	t.m.textEntries.Add(float64(len(pieces)))
	return true
}
