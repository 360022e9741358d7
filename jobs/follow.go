package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
)

// TextDelta is text of a job that a follower (FollowText) had not handed out yet.
type TextDelta struct {
	Text      string
	Reasoning string
	// Gap says text before this piece was missed: the reader fell more than
	// TextStreamMaxLen entries behind, or resumed after the stream expired. The result has
	// it all. Only a follower with OnReset gets gaps; one without waits for the result for
	// the rest of the text instead.
	Gap    bool
	Cursor TextCursor // where the reader is after this delta
}

// ErrTextDiverged: text already handed out cannot be continued: the job ran again (its
// worker died, or was shut down) and the new attempt's text differs from the old one's. A
// follower with OnReset starts over instead.
var ErrTextDiverged = errors.New("the job's text changed under the stream")

// FollowOptions says how FollowText hands out a job's text.
type FollowOptions struct {
	// After resumes a reader (GET /v1/jobs/{id}/events with Last-Event-ID): the entries
	// after After.Entry, and what the reader has. Its zero value reads from the start.
	After TextCursor
	// Check is how often the job's status is looked at while no text comes (a lookup and
	// one HGETALL): progress changes, and the end of a job that wrote no end entry (failed,
	// cancelled while waiting, its worker lost), show within it. Zero is the client's poll
	// interval.
	Check time.Duration
	// OnText gets each piece of new text; put together, they are the result's text and
	// reasoning.
	OnText func(TextDelta)
	// OnReset, if set, is called when the text handed out cannot be continued
	// (ErrTextDiverged); the reader must drop all text it has, and OnText hands out the
	// current attempt's text again from its start. Nil: FollowText fails instead.
	OnReset func(attempt int)
	// OnProgress, if set, gets the progress each time it changes (phase "queued" while the
	// job waits), as Wait's onProgress does.
	OnProgress func(Progress)
}

// FollowText waits for job id like Wait and hands out its text as the workers generate it,
// from the job's text stream (TextStreamKey): the API's SSE deltas and chat completion
// chunks. It blocks on the stream (XREAD BLOCK) rather than polling it, so a piece reaches
// the reader one Redis round trip after its worker wrote it.
//
// When the job runs again (its worker died and the orphan finder or asynq sent it to
// retry), the new attempt writes its text from the start; FollowText hands out only what
// goes beyond the text already handed out, as long as the new attempt repeats it (a seeded
// job on the same model, or one without a seed, whose seed the workers derive from its id).
// If it does not, it calls OnReset or fails with ErrTextDiverged. Text the stream did not
// have (a stream expired or never written: the job had finished) comes from the result.
func (c *Client) FollowText(ctx context.Context, id string, o FollowOptions) (Result, error) {
	if o.Check <= 0 {
		o.Check = c.cfg.poll
	}
	f := &follower{o: o, cur: o.After}
	f.text = channel{n: o.After.Text, known: o.After.Text == 0}
	f.reasoning = channel{n: o.After.Reasoning, known: o.After.Reasoning == 0}
	var last Progress
	first := true
	next := time.Now() // the next status check
	for {
		if !time.Now().Before(next) {
			st, err := c.Status(ctx, id)
			if err != nil {
				return Result{}, err
			}
			if st.State.Done() {
				res, err := finalResult(st)
				if err != nil {
					return res, err
				}
				return res, f.finish(res)
			}
			if f.ended && st.Result != nil && st.Result.FinishReason != FinishCancelled {
				// The attempt wrote its result before its end entry; asynq records the
				// completion a moment later. A written result is final (Finished).
				return *st.Result, f.finish(*st.Result)
			}
			if o.OnProgress != nil {
				if p := progressOf(st); first || p != last {
					o.OnProgress(p)
					last, first = p, false
				}
			}
			next = time.Now().Add(o.Check)
		}
		pieces, err := c.ReadText(ctx, id, f.cur.Entry, max(time.Until(next), time.Millisecond))
		if err != nil {
			return Result{}, err
		}
		for _, p := range pieces {
			if err := f.piece(p); err != nil {
				return Result{}, fmt.Errorf("job %s: %w", id, err)
			}
			if f.ended {
				next = time.Now() // its result is written: look now
			}
		}
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("wait for job %s: %w", id, err)
		}
	}
}

// follower is FollowText's state.
type follower struct {
	o               FollowOptions
	cur             TextCursor
	text, reasoning channel
	ended           bool // the current attempt wrote its end entry
	stalled         bool // text was missed: the rest waits for the result
}

// channel is what a follower handed out of the answer, or of the reasoning.
type channel struct {
	sent  []byte // the text handed out, if known
	n     int    // its length
	known bool   // sent holds all n bytes (not after resuming from a cursor)
	// catching: a new attempt began and repeats the text from its start; att is what it
	// wrote so far, handed out only beyond n.
	catching bool
	att      []byte
}

// add takes a piece at offset off of the current attempt's text and returns what to hand
// out, and whether text was missed (gap) or contradicts what was handed out (diverged).
func (c *channel) add(s string, off int) (out string, gap, diverged bool) {
	if s == "" {
		return "", false, false
	}
	if !c.catching && off < c.n && off == 0 {
		// The same attempt began again from its start (a worker's shutdown requeues a job
		// without counting a retry).
		c.catching, c.att = true, nil
	}
	if c.catching {
		if off != len(c.att) {
			return "", false, true // missed part of the new attempt: cannot compare
		}
		c.att = append(c.att, s...)
		return c.caughtUp()
	}
	switch {
	case off > c.n:
		gap, c.known = true, false
	case off < c.n: // a resumed reader has part of it
		if off+len(s) <= c.n {
			return "", false, false
		}
		s, off = s[c.n-off:], c.n
	}
	if c.known {
		c.sent = append(c.sent, s...)
	}
	c.n = off + len(s)
	return s, gap, false
}

// skips says whether a piece at off leaves out text after what was handed out.
func (c *channel) skips(s string, off int) bool { return s != "" && !c.catching && off > c.n }

// caughtUp compares a catching channel's new attempt with what was handed out and, once
// the attempt wrote past it, returns the rest.
func (c *channel) caughtUp() (out string, gap, diverged bool) {
	m := min(len(c.att), c.n)
	if !c.known && c.n > 0 || !bytes.Equal(c.att[:m], c.sent[:m]) {
		return "", false, true
	}
	if len(c.att) < c.n {
		return "", false, false
	}
	out = string(c.att[c.n:])
	c.sent, c.n, c.catching, c.att = c.att, len(c.att), false, nil
	return out, false, false
}

// restart hands out the current attempt's text (all of it, after a reset).
func (c *channel) restart() string {
	s := c.sent
	if c.catching {
		s = c.att
	}
	if !c.known && !c.catching {
		s = nil
	}
	*c = channel{sent: s, n: len(s), known: true}
	return string(s)
}

func (f *follower) piece(p TextPiece) error {
	if p.Attempt < f.cur.Attempt {
		f.cur.Entry = p.ID // an attempt taken for dead still writing: the job runs again
		return nil
	}
	if p.Attempt > f.cur.Attempt {
		// A new attempt writes its text from the start.
		f.text.catching, f.text.att = true, nil
		f.reasoning.catching, f.reasoning.att = true, nil
		f.ended = false
	}
	f.cur.Attempt, f.cur.Entry = p.Attempt, p.ID
	if p.End != "" {
		f.ended = true
	}
	if f.stalled {
		return nil
	}
	if f.o.OnReset == nil && (f.text.skips(p.Text, p.TextOffset) || f.reasoning.skips(p.Reasoning, p.ReasoningOffset)) {
		// Text was missed (the stream was trimmed under a slow reader, or a write was
		// lost): what was handed out is still right, and the rest comes from the result.
		f.stalled = true
		return nil
	}
	t, tgap, tdiv := f.text.add(p.Text, p.TextOffset)
	r, rgap, rdiv := f.reasoning.add(p.Reasoning, p.ReasoningOffset)
	if tdiv || rdiv {
		return f.reset()
	}
	f.hand(t, r, tgap || rgap)
	return nil
}

// finish hands out what the result has beyond the text handed out.
func (f *follower) finish(res Result) error {
	var out [2]string
	for i, ch := range []*channel{&f.text, &f.reasoning} {
		final := res.Text
		if i == 1 {
			final = res.Reasoning
		}
		if !ch.catching && !ch.known && ch.n <= len(final) {
			// Resumed: trust the bytes the reader says it has.
			ch.sent, ch.known = []byte(final[:ch.n]), true
		}
		ch.catching, ch.att = true, []byte(final)
		s, _, diverged := ch.caughtUp()
		if diverged || ch.catching {
			// The result does not continue the text handed out, or is shorter.
			if f.o.OnReset == nil {
				return ErrTextDiverged
			}
			f.o.OnReset(f.cur.Attempt)
			f.text = channel{sent: []byte(res.Text), n: len(res.Text), known: true}
			f.reasoning = channel{sent: []byte(res.Reasoning), n: len(res.Reasoning), known: true}
			f.hand(res.Text, res.Reasoning, false)
			return nil
		}
		out[i] = s
	}
	f.hand(out[0], out[1], false)
	return nil
}

// reset starts the text over, or fails without OnReset.
func (f *follower) reset() error {
	if f.o.OnReset == nil {
		return fmt.Errorf("attempt %d: %w", f.cur.Attempt+1, ErrTextDiverged)
	}
	f.o.OnReset(f.cur.Attempt)
	t, r := f.text.restart(), f.reasoning.restart()
	f.hand(t, r, false)
	return nil
}

func (f *follower) hand(text, reasoning string, gap bool) {
	f.cur.Text, f.cur.Reasoning = f.text.n, f.reasoning.n
	if text == "" && reasoning == "" {
		return
	}
	if f.o.OnText != nil {
		f.o.OnText(TextDelta{Text: text, Reasoning: reasoning, Gap: gap, Cursor: f.cur})
	}
}
