package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redlite/batch/internal/redistest"
)

// pieces cuts an attempt's text into pieces of n bytes with their offsets.
func pieces(attempt int, text string, n int) []TextPiece {
	var ps []TextPiece
	for off := 0; off < len(text); off += n {
		ps = append(ps, TextPiece{Attempt: attempt, Text: text[off:min(off+n, len(text))], TextOffset: off})
	}
	return ps
}

// followed runs a follower over the pieces and the result and returns what a reader got:
// its text, and how many resets it was told of.
func followed(t *testing.T, after TextCursor, resets bool, res Result, ps ...TextPiece) (string, int, error) {
	t.Helper()
	var got strings.Builder
	n := 0
	o := FollowOptions{After: after, OnText: func(d TextDelta) {
		got.WriteString(d.Text)
		if d.Cursor.Text < got.Len() {
			t.Errorf("cursor %+v behind the %d bytes handed out", d.Cursor, got.Len())
		}
	}}
	if resets {
		o.OnReset = func(int) { n++; got.Reset() }
	}
	f := &follower{o: o, cur: after,
		text: channel{n: after.Text, known: after.Text == 0}, reasoning: channel{known: true}}
	for i, p := range ps {
		p.ID = "1-" + string(rune('a'+i))
		if err := f.piece(p); err != nil {
			return got.String(), n, err
		}
	}
	err := f.finish(res)
	return got.String(), n, err
}

// TestFollower: the text a reader gets, put together, is the result's, however the
// stream went: pieces, a retry repeating the text, a retry that differs, a resumed reader.
func TestFollower(t *testing.T) {
	const text = "Once upon a time there was a stream."
	res := Result{Text: text}
	join := func(ps ...[]TextPiece) []TextPiece {
		var all []TextPiece
		for _, p := range ps {
			all = append(all, p...)
		}
		return all
	}
	t.Run("Pieces", func(t *testing.T) {
		// The stream has the first 20 bytes; the rest (held back at the end) is in the result.
		got, _, err := followed(t, TextCursor{}, false, res, pieces(0, text[:20], 3)...)
		if err != nil || got != text {
			t.Errorf("got %q, %v", got, err)
		}
	})
	t.Run("NoStream", func(t *testing.T) {
		got, _, err := followed(t, TextCursor{}, false, res)
		if err != nil || got != text {
			t.Errorf("got %q, %v", got, err)
		}
	})
	t.Run("RetryRepeats", func(t *testing.T) {
		// Attempt 0 streams 25 bytes and dies; attempt 1 writes it all again, in other
		// pieces; its stale predecessor's late write is ignored.
		retry := pieces(1, text, 5)
		ps := join(pieces(0, text[:25], 4), retry[:2], []TextPiece{{Attempt: 0, Text: "XX", TextOffset: 25}}, retry[2:])
		got, resets, err := followed(t, TextCursor{}, false, res, ps...)
		if err != nil || got != text || resets != 0 {
			t.Errorf("got %q, %d resets, %v", got, resets, err)
		}
	})
	t.Run("RequeuedSameAttempt", func(t *testing.T) {
		// A shutdown requeues without counting a retry: the same attempt starts over.
		got, _, err := followed(t, TextCursor{}, false, res, join(pieces(0, text[:12], 4), pieces(0, text, 6))...)
		if err != nil || got != text {
			t.Errorf("got %q, %v", got, err)
		}
	})
	t.Run("RetryDiffers", func(t *testing.T) {
		other := "Once upon a midnight dreary."
		ps := join(pieces(0, text[:20], 4), pieces(1, other, 4))
		if _, _, err := followed(t, TextCursor{}, false, Result{Text: other}, ps...); !errors.Is(err, ErrTextDiverged) {
			t.Errorf("without OnReset: %v, want ErrTextDiverged", err)
		}
		got, resets, err := followed(t, TextCursor{}, true, Result{Text: other}, ps...)
		if err != nil || got != other || resets != 1 {
			t.Errorf("with OnReset: got %q after %d resets, %v; want %q after 1", got, resets, err, other)
		}
	})
	t.Run("ResultDiffers", func(t *testing.T) {
		// The stream showed one attempt, the result is another's (its stream was lost).
		if _, _, err := followed(t, TextCursor{}, false, Result{Text: "Something else."}, pieces(0, text[:20], 4)...); !errors.Is(err, ErrTextDiverged) {
			t.Errorf("%v, want ErrTextDiverged", err)
		}
	})
	t.Run("Resumed", func(t *testing.T) {
		// A reader that had 12 bytes reconnects: it gets the rest, once.
		got, _, err := followed(t, TextCursor{Text: 12, Entry: "1-0"}, true, res, pieces(0, text, 5)[2:]...)
		if err != nil || text[:12]+got != text {
			t.Errorf("got %q, %v", got, err)
		}
		// … and after the job ended and its stream expired, from the result alone.
		got, _, err = followed(t, TextCursor{Text: 12, Entry: "1-0"}, true, res)
		if err != nil || text[:12]+got != text {
			t.Errorf("from the result: got %q, %v", got, err)
		}
	})
	t.Run("Gap", func(t *testing.T) {
		// Pieces missed (trimmed, or a write lost): a reader without OnReset gets the rest
		// from the result, none of the pieces after the gap; one with it gets them, marked.
		ps := join(pieces(0, text[:8], 4), pieces(0, text, 4)[4:])
		var deltas []TextDelta
		o := FollowOptions{OnText: func(d TextDelta) { deltas = append(deltas, d) }}
		f := &follower{o: o, text: channel{known: true}, reasoning: channel{known: true}}
		for _, p := range ps {
			if err := f.piece(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.finish(res); err != nil || len(deltas) != 3 || deltas[2].Text != text[8:] {
			t.Errorf("without OnReset: %v, %+v; want 2 pieces then the rest", err, deltas)
		}
		got, _, err := followed(t, TextCursor{}, true, res, ps...)
		if err != nil || got != text[:8]+text[16:] {
			t.Errorf("with OnReset: %q, %v", got, err)
		}
	})
}

// TestTextStream: pieces appended come back in order, with their fields, and a reader
// blocked on a stream that does not exist yet gets the first entry.
func TestTextStream(t *testing.T) {
	r := redistest.Start(t)
	c, err := NewClient(r.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	got := make(chan []TextPiece, 1)
	go func() {
		ps, err := c.ReadText(ctx, "j", "", 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- ps
	}()
	want := []TextPiece{
		{Attempt: 1, Text: "héllo", Generated: 2},
		{Attempt: 1, Text: " wörld", TextOffset: 6, Reasoning: "hm", ReasoningOffset: 0, Generated: 3},
		{Attempt: 1, End: FinishStop},
	}
	// The reader may not be blocked yet; either way it must get the first entry.
	if err := c.AppendText(ctx, "j", want...); err != nil {
		t.Fatal(err)
	}
	if ps := <-got; len(ps) == 0 || ps[0].Text != "héllo" {
		t.Fatalf("blocked reader got %+v", ps)
	}
	ps, err := c.ReadText(ctx, "j", "0", time.Millisecond)
	if err != nil || len(ps) != len(want) {
		t.Fatalf("%v, %+v", err, ps)
	}
	for i := range want {
		want[i].ID = ps[i].ID
		if ps[i] != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, ps[i], want[i])
		}
	}
	ttl, err := c.rdb.TTL(ctx, TextStreamKey("j")).Result()
	if err != nil || ttl <= 0 || ttl > TextStreamEndTTL {
		t.Errorf("TTL after the end entry %v (%v), want ≤ %v", ttl, err, TextStreamEndTTL)
	}
	if ps, err := c.ReadText(ctx, "none", "0", time.Millisecond); err != nil || ps != nil {
		t.Errorf("missing stream: %+v, %v", ps, err)
	}
}

// BenchmarkAppendText is the cost of one stream entry against a real redis-server on
// loopback: an XADD MAXLEN ~ and an EXPIRE in one round trip, what a worker pays per token
// when tokens come slower than REDLITE_STREAM_INTERVAL.
//
//	go test ./jobs -run '^$' -bench AppendText
func BenchmarkAppendText(b *testing.B) {
	r := redistest.Start(b)
	c, err := NewClient(r.URL(0))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if err := c.AppendText(ctx, "bench", TextPiece{Text: " token", TextOffset: 6 * i, Generated: i + 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParseTextCursor: a client's Last-Event-ID never panics the parser, and what parses
// prints back the same.
func FuzzParseTextCursor(f *testing.F) {
	for _, s := range []string{"0.0.0.", "1.120.3.1765110000000-3", "", "a.b.c.d", "1.2.3.4-", "99999999999999.0.0.1-1", "0.0.0.1-1.2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseTextCursor(s)
		if err != nil {
			return
		}
		if c2, err := ParseTextCursor(c.String()); err != nil || c2 != c {
			t.Errorf("%q → %+v → %q → %+v, %v", s, c, c.String(), c2, err)
		}
	})
}
