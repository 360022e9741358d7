package daemon

import (
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlite/batch/jobs"
)

// countWriter counts the progress writes and their bytes.
type countWriter struct{ writes, bytes atomic.Int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	c.bytes.Add(int64(len(p)))
	return len(p), nil
}

// BenchmarkProgressTextWrites feeds a progress writer one token of text every 2 ms (500
// tokens/s, a fast decode) and reports the writes a second that reach Redis, and their
// size, at the default REDLITE_STREAM_INTERVAL.
//
//	go test ./daemon -run '^$' -bench ProgressTextWrites -benchtime 1x
func BenchmarkProgressTextWrites(b *testing.B) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	var c countWriter
	p := newProgressWriter(&c, 250*time.Millisecond, 50*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)), m)
	p.start()
	start := time.Now()
	for n := 1; n <= 1000*b.N; n++ {
		p.update(func(pr *jobs.Progress) { pr.Generated = n; pr.AppendText(" token", "") })
		time.Sleep(2 * time.Millisecond)
	}
	p.terminate()
	s := time.Since(start).Seconds()
	b.ReportMetric(float64(c.writes.Load())/s, "writes/s")
	b.ReportMetric(float64(c.bytes.Load())/float64(c.writes.Load()), "B/write")
	b.ReportMetric(float64(1000*b.N)/s, "tokens/s")
}
