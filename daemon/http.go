package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redlite/batch/jobs"
)

// readyzRedisTimeout bounds the Redis ping of one /readyz request: a probe must answer
// quickly, and Redis on the LAN answers in a millisecond.
const readyzRedisTimeout = time.Second

// httpServer serves /healthz, /readyz and /metrics on one port.
type httpServer struct {
	log    *slog.Logger
	client *jobs.Client
	srv    *http.Server
	ln     net.Listener
	// ready is set once the model is loaded and the worker runs, and cleared when shutdown
	// begins, so that a load balancer or launchd check stops counting on this worker first.
	ready atomic.Bool
	// detail, when set, is a line /readyz adds after "ready" (the Mac's wired limit).
	detail atomic.Pointer[string]
	done   chan error
}

func newHTTPServer(addr string, log *slog.Logger, client *jobs.Client, gatherer prometheus.Gatherer) (*httpServer, error) {
	h := &httpServer{log: log, client: client, done: make(chan error, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", h.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	h.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("REDLITE_HTTP_ADDR: listen on %s: %w", addr, err)
	}
	h.ln = ln
	return h, nil
}

func (h *httpServer) addr() string { return h.ln.Addr().String() }

func (h *httpServer) start() {
	go func() {
		err := h.srv.Serve(h.ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		h.done <- err
	}()
}

// terminate closes the listener and waits for requests in flight (a scrape) to finish.
func (h *httpServer) terminate() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		h.log.Warn("http server shutdown", "err", err)
	}
	if err := <-h.done; err != nil {
		h.log.Warn("http server", "err", err)
	}
}

// readyz answers 200 when the model is loaded, the worker runs and Redis answers a PING;
// otherwise 503 with the reason.
func (h *httpServer) readyz(w http.ResponseWriter, r *http.Request) {
	if !h.ready.Load() {
		http.Error(w, "not ready: model loading or shutting down", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyzRedisTimeout)
	defer cancel()
	if err := h.client.Ping(ctx); err != nil {
		// During a Sentinel failover this says so: the sentinels are asked for the primary,
		// which is down or not yet replaced.
		http.Error(w, fmt.Sprintf("not ready: %s: %v", h.client.Redis(), err), http.StatusServiceUnavailable)
		return
	}
	// A full Redis answers PING but refuses every write: no job can start or finish.
	if err := h.client.CheckMemory(ctx); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
	if d := h.detail.Load(); d != nil {
		fmt.Fprintln(w, *d)
	}
}
