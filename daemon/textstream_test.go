package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlite/batch/internal/redistest"
	"github.com/redlite/batch/jobs"
)

func textWriterSetup(t testing.TB, slice time.Duration) (*textWriter, *jobs.Client, *metrics) {
	t.Helper()
	w, c, m, _ := textWriterRedis(t, slice)
	return w, c, m
}

func textWriterRedis(t testing.TB, slice time.Duration) (*textWriter, *jobs.Client, *metrics, *redistest.Server) {
	t.Helper()
	r := redistest.Start(t)
	c, err := jobs.NewClient(r.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w := newTextWriter(c, "job-1", 2, slice, slog.New(slog.NewTextHandler(io.Discard, nil)), m)
	w.start()
	t.Cleanup(w.terminate)
	return w, c, m, r
}

// readAll reads job-1's whole text stream.
func readAll(t testing.TB, c *jobs.Client) []jobs.TextPiece {
	t.Helper()
	var all []jobs.TextPiece
	after := ""
	for {
		ps, err := c.ReadText(context.Background(), "job-1", after, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) == 0 {
			return all
		}
		all = append(all, ps...)
		after = ps[len(ps)-1].ID
	}
}

// TestTextWriter: what a worker pushes arrives in the job's text stream in order, with
// offsets that put it together, and the end entry last.
func TestTextWriter(t *testing.T) {
	t.Run("EntryPerToken", func(t *testing.T) {
		w, c, m := textWriterSetup(t, 0)
		var want strings.Builder
		for i := 1; i <= 300; i++ {
			s := fmt.Sprintf(" tok%d", i)
			want.WriteString(s)
			w.push(s, "", i)
		}
		w.push("", "", 301) // nothing released: no entry
		w.end(jobs.FinishLength)
		ps := readAll(t, c)
		if len(ps) != 301 {
			t.Fatalf("%d entries, want 300 tokens and the end", len(ps))
		}
		var got strings.Builder
		for i, p := range ps[:300] {
			if p.Attempt != 2 || p.TextOffset != got.Len() || p.Generated != i+1 || p.End != "" {
				t.Fatalf("entry %d: %+v, want attempt 2, offset %d, generated %d", i, p, got.Len(), i+1)
			}
			got.WriteString(p.Text)
		}
		if got.String() != want.String() {
			t.Errorf("text %q, want %q", got.String(), want.String())
		}
		if end := ps[300]; end.End != jobs.FinishLength || end.Text != "" {
			t.Errorf("end entry %+v", end)
		}
		if n := counterValue(m.textEntries); n != 301 {
			t.Errorf("redlite_text_stream_entries_total %v, want 301", n)
		}
	})
	t.Run("SliceMerges", func(t *testing.T) {
		// A slice longer than the test: everything pushed after the first write waits for
		// it, in one entry.
		w, c, m := textWriterSetup(t, time.Hour)
		w.push("a", "r1", 1)
		for i := 2; i <= 50; i++ {
			w.push("b", "", i)
		}
		w.end(jobs.FinishStop)
		ps := readAll(t, c)
		var text, reasoning string
		for _, p := range ps {
			if p.Text != "" && p.TextOffset != len(text) || p.Reasoning != "" && p.ReasoningOffset != len(reasoning) {
				t.Fatalf("entry %+v after %q", p, text)
			}
			text += p.Text
			reasoning += p.Reasoning
		}
		if text != "a"+strings.Repeat("b", 49) || reasoning != "r1" || ps[len(ps)-1].End != jobs.FinishStop {
			t.Errorf("%d entries, text %q, reasoning %q", len(ps), text, reasoning)
		}
		if len(ps) > 3 {
			t.Errorf("%d entries for 50 tokens within one slice, want at most the first, the rest and the end", len(ps))
		}
		if n := counterValue(m.textWrites.WithLabelValues("ok")); n > 3 {
			t.Errorf("%v round trips, want at most 3", n)
		}
	})
	t.Run("KeepsWhatFailed", func(t *testing.T) {
		// Redis away when a piece is written: it goes with the next write, in order.
		w, c, m, r := textWriterRedis(t, 0)
		r.Stop()
		w.push("a", "", 1)
		waitUntil(t, "the failed write", func() bool { return counterValue(m.textWrites.WithLabelValues("error")) > 0 })
		r.Restart()
		w.push("b", "", 2)
		w.end(jobs.FinishStop)
		var text string
		for _, p := range readAll(t, c) {
			if p.Text != "" && p.TextOffset != len(text) {
				t.Fatalf("entry %+v after %q", p, text)
			}
			text += p.Text
		}
		if text != "ab" {
			t.Errorf("text %q, want \"ab\"", text)
		}
	})
	t.Run("TerminateDrops", func(t *testing.T) {
		w, c, _ := textWriterSetup(t, time.Hour)
		w.push("a", "", 1)
		if ps, err := c.ReadText(context.Background(), "job-1", "", 10*time.Second); err != nil || len(ps) != 1 {
			t.Fatalf("first entry: %v %+v", err, ps)
		}
		w.push("b", "", 2) // waits for the slice
		w.terminate()
		w.terminate()
		for _, p := range readAll(t, c) {
			if p.End != "" || strings.Contains(p.Text, "b") {
				t.Errorf("entry %+v written after terminate", p)
			}
		}
	})
}

// BenchmarkTextWriter feeds a job's text writer 200 tokens at a fixed gap against a real
// redis-server and reports what a token costs: Redis round trips and stream entries per
// token at the default 5 ms slice, and the engine's time in push (the only part on the
// decode path).
//
//	go test ./daemon -run '^$' -bench TextWriter -benchtime 3x
func BenchmarkTextWriter(b *testing.B) {
	for _, gap := range []time.Duration{0, 500 * time.Microsecond, 2 * time.Millisecond, 10 * time.Millisecond} {
		b.Run("gap="+gap.String(), func(b *testing.B) {
			w, _, m := textWriterSetup(b, 5*time.Millisecond)
			const tokens = 200
			var inPush time.Duration
			start := time.Now()
			b.ResetTimer()
			for range b.N {
				for i := 1; i <= tokens; i++ {
					t0 := time.Now()
					w.push(" token", "", i)
					inPush += time.Since(t0)
					if gap > 0 {
						time.Sleep(gap)
					}
				}
			}
			w.end(jobs.FinishLength)
			n := float64(tokens * b.N)
			b.ReportMetric(counterValue(m.textWrites.WithLabelValues("ok"))/n, "roundtrips/token")
			b.ReportMetric(counterValue(m.textEntries)/n, "entries/token")
			b.ReportMetric(float64(inPush.Nanoseconds())/n, "push-ns/token")
			b.ReportMetric(n/time.Since(start).Seconds(), "tokens/s") // sleeps overshoot on a busy machine
		})
	}
}

// TestTextStreamFollow: a client following a job's text (jobs.Client.FollowText) gets the
// result's text as the worker decodes it, at the default 5 ms slice. How far the worker had
// got when the client had the first text is logged, not asserted: it depends on the
// machine's load.
func TestTextStreamFollow(t *testing.T) {
	b := setup(t)
	b.cfg.StreamInterval = DefaultConfig().StreamInterval
	var firstToken atomic.Int64 // Unix ns
	var generated atomic.Int64
	startDaemon(t, b.cfg, Observer{Token: func(_ context.Context, _ string, n int) {
		if n == 1 {
			firstToken.Store(time.Now().UnixNano())
		}
		generated.Store(int64(n))
	}})
	job := enqueue(t, b.client, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(300), Seed: ptr(int64(3))})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	var text strings.Builder
	var firstText time.Time
	var generatedThen int64
	deltas := 0
	res, err := b.client.FollowText(ctx, job.ID, jobs.FollowOptions{OnText: func(d jobs.TextDelta) {
		if deltas == 0 {
			firstText, generatedThen = time.Now(), generated.Load()
		}
		deltas++
		text.WriteString(d.Text)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if text.String() != res.Text || deltas < 2 {
		t.Fatalf("%d deltas make %q\nresult %q", deltas, text.String(), res.Text)
	}
	ps, err := b.client.ReadText(ctx, job.ID, "", time.Millisecond)
	if err != nil || len(ps) == 0 {
		t.Fatalf("the stream after the job: %v, %d entries", err, len(ps))
	}
	t.Logf("%d tokens in %d deltas (decode %.0f ms); the first text, released with token %d, reached the client %v after token 1, when the worker had sampled %d",
		res.Usage.CompletionTokens, deltas, res.Timings.DecodeMS, ps[0].Generated,
		firstText.Sub(time.Unix(0, firstToken.Load())).Round(10*time.Microsecond), generatedThen)
}
