// Package api is redlite-api: the public HTTP surface of Red Lite Batch. It serves the
// native job API (/v1/jobs), an OpenAI-compatible files + batches API and chat completions,
// all on jobs.Client, so that routing, validation and idempotency are the Go client's. Every
// piece of state lives in Redis (keys.go lists the keys), so that several instances can run
// behind a load balancer and a restart loses nothing.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/internal/redisx"
	"github.com/redlite/batch/jobs"
)

// readyTimeout bounds the Redis ping of one /readyz request.
const readyTimeout = time.Second

// Options are the parts of a Server that are not configuration.
type Options struct {
	// Logger receives the logs; nil means NewLogger(cfg, os.Stderr).
	Logger *slog.Logger
	// Registry receives the metrics served at /metrics; nil means a new registry.
	Registry *prometheus.Registry
}

// Server is one redlite-api instance.
type Server struct {
	cfg    Config
	log    *slog.Logger
	client *jobs.Client
	rdb    redis.UniversalClient
	// streams is the pool of the text streams' blocking reads (jobs.WithStreamRedis).
	streams redis.UniversalClient
	tokens  [][sha256.Size]byte
	// hookSecret is the workers' webhook secret, from which each token's is derived.
	hookSecret []byte
	m          *metrics
	handler    http.Handler
	gather     prometheus.Gatherer

	srv      *http.Server
	ln       net.Listener
	served   chan error
	batches  *batchRunner
	stopOnce sync.Once
}

// New checks cfg and makes a server; nothing listens or runs until Start.
func New(cfg Config, o Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		var err error
		if log, err = NewLogger(cfg, nil); err != nil {
			return nil, err
		}
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	tokens, err := cfg.tokenHashes()
	if err != nil {
		return nil, err
	}
	hookSecret, err := cfg.Secret()
	if err != nil {
		return nil, err
	}
	u, err := cfg.URL()
	if err != nil {
		return nil, err
	}
	// One connection pool for the server: the jobs client and the API's own keys share it.
	rdb, err := redisx.NewClient(u)
	if err != nil {
		return nil, err
	}
	streams, err := redisx.NewStreamClient(u, maxStreamReaders)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	client, err := jobs.NewClientFromRedis(rdb, u, jobs.WithPollInterval(cfg.PollInterval), jobs.WithWebhookAllow(cfg.WebhookAllow),
		jobs.WithStreamRedis(streams))
	if err != nil {
		_ = rdb.Close()
		_ = streams.Close()
		return nil, fmt.Errorf("REDLITE_REDIS_URL: %w", err)
	}
	s := &Server{cfg: cfg, log: log, client: client, rdb: rdb, streams: streams, tokens: tokens, hookSecret: hookSecret,
		m: newMetrics(reg), gather: reg, served: make(chan error, 1)}
	s.batches = newBatchRunner(s)
	s.handler = s.routes()
	return s, nil
}

// Handler is the API's HTTP handler, for tests and for embedding.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	open := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, h) }
	authed := func(pattern string, h func(w http.ResponseWriter, r *http.Request) error) {
		mux.Handle(pattern, s.auth(h))
	}
	open("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	open("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.gather, promhttp.HandlerOpts{}))
	open("GET /v1/openapi.json", serveOpenAPI)

	handlers := map[string]func(w http.ResponseWriter, r *http.Request) error{
		"POST /v1/jobs":                s.postJob,
		"GET /v1/jobs/{id}":            s.getJob,
		"GET /v1/jobs/{id}/result":     s.getResult,
		"GET /v1/jobs/{id}/events":     s.getEvents,
		"DELETE /v1/jobs/{id}":         s.deleteJob,
		"GET /v1/workers":              s.getWorkers,
		"GET /v1/models":               s.getModels,
		"GET /v1/models/{id}":          s.getModel,
		"POST /v1/files":               s.postFile,
		"GET /v1/files":                s.listFiles,
		"GET /v1/files/{id}":           s.getFile,
		"GET /v1/files/{id}/content":   s.getFileContent,
		"DELETE /v1/files/{id}":        s.deleteFile,
		"POST /v1/batches":             s.postBatch,
		"GET /v1/batches":              s.listBatches,
		"GET /v1/batches/{id}":         s.getBatch,
		"POST /v1/batches/{id}/cancel": s.cancelBatch,
		"POST /v1/chat/completions":    s.textHandler(chatRoute),
		"POST /v1/completions":         s.textHandler(completionRoute),
		"POST /v1/responses":           s.textHandler(responseRoute),
		"GET /v1/webhook_secret":       s.getWebhookSecret,
	}
	// The OpenAPI document's operations are the routing table (openapi.go).
	for _, op := range operations() {
		pattern := op.method + " " + op.path
		h, ok := handlers[pattern]
		if !ok {
			panic("api: the OpenAPI document has " + pattern + " but no handler does")
		}
		authed(pattern, h)
		delete(handlers, pattern)
	}
	for pattern := range handlers {
		panic("api: " + pattern + " has a handler but is not in the OpenAPI document")
	}

	open("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := allowed(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, &apiError{status: http.StatusMethodNotAllowed, typ: typeInvalid, code: "method_not_allowed",
				msg: fmt.Sprintf("%s is not allowed on %s; allowed: %s", clip(r.Method), r.URL.Path, strings.Join(allow, ", "))})
			return
		}
		writeError(w, &apiError{status: http.StatusNotFound, typ: typeInvalid, code: "unknown_route",
			msg: fmt.Sprintf("no route %s %s; see /v1/openapi.json", clip(r.Method), r.URL.Path)})
	})
	return s.instrument(s.cors(mux))
}

// routeMethods are the methods the API's routes use, which allowed tries.
var routeMethods = []string{http.MethodGet, http.MethodPost, http.MethodDelete}

// allowed lists the methods that have a route for r's path, for a 405's Allow header: the
// catch-all "/" matches every method, so the mux never answers 405 by itself.
func allowed(mux *http.ServeMux, r *http.Request) []string {
	var out []string
	for _, m := range routeMethods {
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			out = append(out, m)
		}
	}
	return out
}

type ctxKey struct{}

// caller is the authenticated token, as the short digest that names its keys in Redis.
func caller(r *http.Request) string { v, _ := r.Context().Value(ctxKey{}).(string); return v }

// auth checks the bearer token against every configured digest in constant time, applies
// the token's rate limit and then calls h, writing h's error in OpenAI's shape. The token
// itself is never logged or stored: only its SHA-256.
func (s *Server) auth(h func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		authz := r.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(authz, "Bearer ")
		if !ok || strings.TrimSpace(tok) == "" {
			writeError(w, &apiError{status: http.StatusUnauthorized, typ: typeAuth, code: "missing_api_key",
				msg: "missing bearer token: send the header Authorization: Bearer <token>"})
			return
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
		found := 0
		for _, t := range s.tokens {
			found |= subtle.ConstantTimeCompare(sum[:], t[:])
		}
		if found == 0 {
			writeError(w, &apiError{status: http.StatusUnauthorized, typ: typeAuth, code: "invalid_api_key",
				msg: "invalid bearer token: it is not one of REDLITE_API_TOKENS or REDLITE_API_TOKENS_FILE"})
			return
		}
		who := hex.EncodeToString(sum[:8])
		if err := s.rateLimit(r.Context(), who); err != nil {
			writeError(w, err)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, who))
		if err := h(w, r); err != nil {
			ae := asAPIError(err)
			if ae.status >= 500 {
				s.log.Error("request failed", "method", r.Method, "route", r.Pattern, "err", err)
			}
			writeError(w, ae)
		}
	})
}

// rateLimit counts the token's requests in the current second in Redis, so that the limit
// holds across instances: a fixed window, which lets through at most twice the limit across
// a window edge, a price paid for one round trip per request.
func (s *Server) rateLimit(ctx context.Context, who string) error {
	if s.cfg.RateLimit == 0 {
		return nil
	}
	now := time.Now()
	key := keyRate(who, now.Unix())
	var n *redis.IntCmd
	err := s.tx(ctx, func(p redis.Pipeliner) error {
		n = p.Incr(ctx, key)
		p.Expire(ctx, key, 2*time.Second)
		return nil
	})
	if err != nil && errors.Is(redisx.Classify(err), jobs.ErrRedisOOM) {
		// A full Redis refuses the count, not the request: reads, and the deletions that
		// give memory back, must still work; every write is refused on its own anyway.
		return nil
	}
	if err != nil {
		return serverError(fmt.Errorf("rate limit: %w", err))
	}
	if n.Val() > int64(s.cfg.RateLimit) {
		s.m.limited.WithLabelValues("rate").Inc()
		return &apiError{status: http.StatusTooManyRequests, typ: typeRate, code: "rate_limit_exceeded", retryAfter: time.Second,
			msg: fmt.Sprintf("rate limit of %d requests per second for this token reached (REDLITE_API_RATE_LIMIT); retry after 1s", s.cfg.RateLimit)}
	}
	return nil
}

// cors answers browsers only for the configured origins; with none, it adds nothing and a
// browser's cross-origin call fails, which is the safe default for a bearer-token API.
func (s *Server) cors(next http.Handler) http.Handler {
	if len(s.cfg.CORSOrigins) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && (slices.Contains(s.cfg.CORSOrigins, "*") || slices.Contains(s.cfg.CORSOrigins, origin)) {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Vary", "Origin")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key")
			h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
			if r.Method == http.MethodOptions {
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// readyz answers 200 when Redis answers and takes writes, 503 with the reason otherwise.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	err := s.client.Ping(ctx)
	if err == nil {
		// PING answers while Redis refuses every write at its maxmemory, when no job, file
		// or batch can be stored: not ready, so that operators and probes see it.
		err = s.client.CheckMemory(ctx)
	}
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	io.WriteString(w, "ready\n")
}

// Start listens on REDLITE_API_ADDR and starts the batch runner.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("REDLITE_API_ADDR: listen on %s: %w", s.cfg.Addr, err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.served <- err
	}()
	s.batches.start()
	s.log.Info("redlite-api listening", "addr", ln.Addr().String(), "redis", s.client.Redis())
	return nil
}

// Addr is the address the server listens on, once started.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops taking requests, lets those in flight finish for a few seconds (long polls
// and event streams are cut: their clients reconnect), stops the batch runner, and closes
// Redis. The runner stops after the listener: a batch request in flight may still need it
// to be running, and nothing it does is lost if it stops midway.
func (s *Server) Shutdown() {
	s.stopOnce.Do(func() {
		if s.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := s.srv.Shutdown(ctx); err != nil {
				s.srv.Close()
			}
			cancel()
			if err := <-s.served; err != nil {
				s.log.Warn("http server", "err", err)
			}
		}
		s.batches.terminate()
		s.client.Close()
		s.rdb.Close()
		s.streams.Close()
		s.log.Info("redlite-api stopped")
	})
}

// Run starts a server, serves until ctx ends, then shuts it down.
func Run(ctx context.Context, cfg Config, o Options) error {
	s, err := New(cfg, o)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		s.Shutdown()
		return err
	}
	<-ctx.Done()
	s.Shutdown()
	return nil
}
