package api

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	limited  *prometheus.CounterVec
	enqueued *prometheus.CounterVec
	batches  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "redlite_api_requests_total",
			Help: "HTTP requests answered, by route pattern and status code."}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "redlite_api_request_duration_seconds",
			Help: "Time to answer an HTTP request, by route pattern (long polls and streams included).",
			// From a Redis round trip to a long poll's wait.
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}, []string{"route"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "redlite_api_limited_total",
			Help: "Requests refused by a per-token limit (rate or queued jobs)."}, []string{"limit"}),
		enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "redlite_api_jobs_enqueued_total",
			Help: "Jobs enqueued through the API, by source (jobs, chat, batch)."}, []string{"source"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "redlite_api_batches_total",
			Help: "Batches that reached a final status, by status."}, []string{"status"}),
	}
	reg.MustRegister(m.requests, m.latency, m.limited, m.enqueued, m.batches)
	return m
}

// recorder keeps the status a handler wrote; Flush passes through for event streams.
type recorder struct {
	http.ResponseWriter
	code int
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// instrument counts every request by its route pattern (never the raw path, whose ids would
// make a label per job) and status.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		route := r.Pattern
		if route == "" || route == "/" {
			route = "unmatched"
		}
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		s.m.requests.WithLabelValues(route, strconv.Itoa(rec.code)).Inc()
		s.m.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

// NewLogger makes the logger from REDLITE_LOG_FORMAT and REDLITE_LOG_LEVEL; w nil means
// standard error.
func NewLogger(cfg Config, w io.Writer) (*slog.Logger, error) {
	if w == nil {
		w = os.Stderr
	}
	return cfg.NewLogger(w)
}
