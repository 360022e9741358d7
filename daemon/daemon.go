// Package daemon is redlited: an asynq server whose handlers run Red Lite Batch jobs on the
// engine. A job is decoded and validated (jobs), tokenized with the model's chat template,
// planned to fit the worker's memory limit (planner), run in an engine session with the
// plan's context, KV precision and prefill chunk, and its result written back to Redis.
// Progress is published while it runs; cancellation, deadlines and timeouts stop the engine
// within one chunk or token. Beside the worker an HTTP server answers /healthz, /readyz and
// /metrics.
//
// Components each live in their own file with a start and a terminate: worker.go (asynq
// server and pipeline.go), http.go, progress.go (one per job). Daemon.Shutdown stops them in
// the order that loses nothing: see its comment.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	asynqmetrics "github.com/hibiken/asynq/x/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/synth"
	"github.com/redlite/batch/internal/buildinfo"
	"github.com/redlite/batch/internal/redisx"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/metalkit"
	"github.com/redlite/batch/planner"
)

// Options are what a caller injects; the zero value is fine.
type Options struct {
	// Logger receives the daemon's logs; nil means NewLogger(cfg, os.Stderr).
	Logger *slog.Logger
	// Registry receives the metrics and is served at /metrics; nil means a new registry
	// with the Go runtime and process collectors.
	Registry *prometheus.Registry
	// Observer receives pipeline events (tests).
	Observer Observer
	// Backend runs the engine; nil means the one REDLITE_BACKEND names (metalkit.Open).
	// Tests inject a wrapped CPU backend to make an operation fail for one job.
	Backend ml.Backend
	// Resolver looks up webhook hosts; nil means the system's. Tests map names with it.
	Resolver jobs.Resolver
	// Orphaned is called when a write of one of this process's attempts is refused because
	// another worker found it orphaned (this process's heartbeats had stopped: it was frozen,
	// and was taken for dead) and sent its job to run again. It must end the process at once,
	// without the graceful shutdown, whose hand-back to the queue would take the job from its
	// new attempt. nil: only that attempt stops. Run sets it to exit with ExitOrphaned.
	Orphaned func()
}

// ExitOrphaned is redlited's exit status when it was taken for dead (Options.Orphaned).
const ExitOrphaned = 3

// Daemon is a running redlited.
type Daemon struct {
	cfg    Config
	log    *slog.Logger
	reg    *prometheus.Registry
	m      *metrics
	redis  jobs.RedisURL
	rdb    redis.UniversalClient // the process's one Redis client (redisx.NewClient)
	client *jobs.Client
	insp   *asynq.Inspector // over rdb: closing rdb closes it
	http   *httpServer      // nil with REDLITE_HTTP_ADDR=off
	obs    Observer
	// orphaned is Options.Orphaned.
	orphaned func()
	// backend is Options.Backend.
	backend ml.Backend
	// resolver is Options.Resolver.
	resolver jobs.Resolver

	lm    *loadedModel
	w     *worker
	hb    *heartbeat       // the worker's name beside asynq's heartbeat (heartbeat.go)
	cp    *capabilities    // what the worker serves and holds, for routing (capabilities.go)
	hooks *webhookSender   // webhook deliveries (webhook.go)
	of    *orphanFinder    // jobs of dead workers (orphans.go)
	sw    *strandedSweeper // jobs in queues no live worker serves (stranded.go)
	// prefixes are the prompt prefixes the worker publishes (affinity.go); nil when it
	// publishes none.
	prefixes *prefixLRU
	// restoreHeapLimit undoes limitHeap at shutdown (tests run several daemons in one
	// process).
	restoreHeapLimit func()
	stopOnce         sync.Once
}

// New checks the configuration, connects lazily to Redis and binds the HTTP port, so that
// every configuration mistake surfaces before the model loads.
func New(cfg Config, o Options) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, configErr(err)
	}
	log := o.Logger
	if log == nil {
		var err error
		if log, err = NewLogger(cfg, os.Stderr); err != nil {
			return nil, err
		}
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	ru, err := cfg.URL()
	if err != nil {
		return nil, configErr(err)
	}
	// One connection pool for the process: asynq's server, inspector and client and our own
	// Redis work (heartbeat, capabilities, webhooks, orphan sweeps) share it.
	rdb, err := redisx.NewClient(ru)
	if err != nil {
		return nil, err
	}
	client, err := jobs.NewClientFromRedis(rdb, ru, jobs.WithWebhookAllow(cfg.WebhookAllow), jobs.WithResolver(o.Resolver))
	if err != nil {
		_ = rdb.Close()
		return nil, configErr(fmt.Errorf("REDLITE_REDIS_URL: %w", err))
	}
	d := &Daemon{cfg: cfg, log: log, reg: reg, m: m, redis: ru, rdb: rdb, client: client, obs: o.Observer, orphaned: o.Orphaned, backend: o.Backend, resolver: o.Resolver,
		insp: asynq.NewInspectorFromRedisClient(rdb)}
	if err := reg.Register(asynqmetrics.NewQueueMetricsCollector(d.insp)); err != nil {
		d.closeClients()
		return nil, fmt.Errorf("register asynq queue metrics: %w", err)
	}
	if err := reg.Register(newRefusedCollector(rdb)); err != nil {
		d.closeClients()
		return nil, fmt.Errorf("register refused-jobs metrics: %w", err)
	}
	if err := reg.Register(newAffinityCollector(rdb)); err != nil {
		d.closeClients()
		return nil, fmt.Errorf("register affinity metrics: %w", err)
	}
	if cfg.HTTPAddr != "off" {
		if d.http, err = newHTTPServer(cfg.HTTPAddr, log, client, reg); err != nil {
			d.closeClients()
			return nil, err
		}
	}
	return d, nil
}

// HTTPAddr is the address /healthz, /readyz and /metrics are served on ("" when off).
func (d *Daemon) HTTPAddr() string {
	if d.http == nil {
		return ""
	}
	return d.http.addr()
}

// ModelName is the name results report, once Start has loaded the model.
func (d *Daemon) ModelName() string {
	if d.lm == nil {
		return ""
	}
	return d.lm.name
}

// Start serves HTTP (healthy, not yet ready), loads the model, plans the budget and starts
// taking jobs; then /readyz turns ready. On error the caller still calls Shutdown.
func (d *Daemon) Start(ctx context.Context) error {
	if d.http != nil {
		d.http.start()
		d.log.Info("http listening", "addr", d.http.addr(), "paths", "/healthz /readyz /metrics")
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	if err := d.client.Ping(pctx); err != nil {
		// asynq keeps trying to connect; /readyz says why the worker is not ready.
		switch {
		case errors.Is(err, jobs.ErrRedisAuth):
			d.log.Error("redis refused the credentials of REDLITE_REDIS_URL (authentication failed): no job can run until the user or password is fixed", "redis", d.redis.String(), "err", err)
		case errors.Is(err, jobs.ErrRedisOOM):
			d.log.Error("redis is out of memory (maxmemory with noeviction): it refuses writes until memory is freed", "redis", d.redis.String(), "err", err)
		default:
			d.log.Warn("redis is not reachable yet; will keep trying", "redis", d.redis.String(), "err", err)
		}
	}
	cancel()

	path := d.cfg.Model
	if path == "" {
		dir, err := d.cacheDir()
		if err != nil {
			return configErr(err)
		}
		if path, err = synth.DefaultModel(dir); err != nil {
			return configErr(err)
		}
		d.log.Warn("REDLITE_MODEL is not set: serving the built-in default model, whose random weights write meaningless text; set REDLITE_MODEL to a GGUF file for real output", "path", path)
	}
	backend := d.backend
	if backend == nil {
		var err error
		if backend, err = metalkit.Open(d.cfg.Backend, d.cfg.Threads, d.cfg.Switches); err != nil {
			return configErr(fmt.Errorf("REDLITE_BACKEND: %w", err))
		}
	}
	lm, err := loadModel(path, d.cfg.ModelName, engine.Options{Backend: backend, Threads: d.cfg.Threads, CPUDot: d.cfg.CPUDot}, d.cfg.ChatTemplate)
	if err != nil {
		// A model file that cannot be loaded is a configuration error (exit 2).
		return configErr(err)
	}
	d.lm = lm
	d.m.modelLoad.Set(lm.m.LoadTime.Seconds())
	d.m.modelInfo.WithLabelValues(lm.name, lm.profile.Architecture).Set(1)
	if lm.tmpl == nil {
		d.log.Warn("the model's chat template cannot be rendered: generate jobs with messages and summarize jobs will be refused", "err", lm.tmplErr)
	}

	budget, err := DeviceBudget(d.cfg)
	if err != nil {
		return fmt.Errorf("memory budget: %w", err)
	}
	if host := lm.m.HostWeightBytes(); host > 0 {
		budget = withHostWeights(budget, host)
		d.log.Info("the backend's copies of the weights are kept out of the budget", "host_weight_mib", host/planner.MiB, "margin_mib", budget.MarginMiB)
	}
	d.m.limitBytes.Set(float64(budget.UsableMiB() * planner.MiB))
	d.checkWiredLimit(budget)
	d.limitHeap(budget, lm)
	cal, err := d.calibration(lm.m.Backend.Name())
	if err != nil {
		return configErr(err)
	}
	policy, err := d.cfg.policy()
	if err != nil {
		return configErr(err)
	}
	name := d.cfg.WorkerName
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			name = "redlited"
		}
	}
	build := buildinfo.Get()
	backendName := lm.m.Backend.Name()
	if d.hb, err = newHeartbeat(d.rdb, jobs.Identity{Name: name, Model: lm.name, Backend: backendName, Build: build}, d.log); err != nil {
		return err
	}
	pool, err := planPool(d.cfg, lm, cal, budget, policy)
	if err != nil {
		return err
	}
	if err := d.startCapabilities(name, lm, budget, cal, policy, pool); err != nil {
		return err
	}
	if d.hooks, err = newWebhookSender(d.rdb, d.cfg, d.resolver, d.log, d.m); err != nil {
		return err
	}
	d.hooks.start()
	d.w = newWorker(&worker{hb: d.hb, hooks: d.hooks, cfg: d.cfg, log: d.log, m: d.m, lm: lm, client: d.client, insp: d.insp, name: name,
		budget: budget, cal: cal, policy: policy, pool: pool, observer: d.obs, orphaned: d.orphaned, affinity: d.prefixes}, d.rdb)
	// Before the asynq server starts, the only time the finder can prove a predecessor with
	// our own PID (a container's PID 1) dead: its jobs go to retry (orphans.go).
	if d.of, err = newOrphanFinder(d.rdb, d.client, d.insp, d.cfg.Queues, d.log); err != nil {
		return err
	}
	if n := d.of.sweep(ctx, true); n > 0 {
		d.log.Info("jobs of dead workers sent to retry", "jobs", n)
	}
	d.of.start()
	if err := d.w.start(); err != nil {
		d.w = nil
		return err
	}
	d.sw = newStrandedSweeper(d.client, d.insp, name, d.cfg.CapabilityTTL, d.log, d.m)
	d.sw.start()
	d.m.buildInfo.WithLabelValues(build.Version, build.Commit, build.Go, backendName).Set(1)
	d.hb.start()
	d.log.Info("redlited started", "version", build.Version, "commit", build.Commit, "backend", backendName, "model", lm.name, "architecture", lm.profile.Architecture, "path", path,
		"load_time", lm.m.LoadTime.Round(time.Millisecond), "worker", name, "redis", d.redis.String(),
		"queues", d.cfg.Queues, "concurrency", d.cfg.Concurrency,
		"limit_mib", budget.UsableMiB(), "budget_source", budget.Source, "calibration", cal.Name)
	if d.http != nil {
		d.http.ready.Store(true)
	}
	return nil
}

// limitHeap makes the Go collector keep the heap within the budget on the CPU backend, where
// the KV cache, states and every intermediate live on the Go heap and the weights are mapped
// beside it: the soft memory limit is the usable budget less the mapped file. Without it the
// collector lets garbage grow to the size of the live heap (GOGC=100), so a worker near its
// limit could exceed what it planned. GOMEMLIMIT, when the operator sets it, wins; on Metal the
// budget is GPU memory, not heap, and nothing is set.
func (d *Daemon) limitHeap(b planner.Budget, lm *loadedModel) {
	if b.Source == planner.SourceMetal || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	// The margin grew by the backend's copies of the weights (withHostWeights); those on
	// the heap come back to it, those mapped beside it do not.
	heap := b.UsableMiB()*planner.MiB - lm.m.File.Size() + lm.m.HostWeightBytes() - lm.m.MappedWeightBytes()
	if heap <= 0 {
		return
	}
	prev := debug.SetMemoryLimit(heap)
	d.restoreHeapLimit = func() { debug.SetMemoryLimit(prev) }
	d.log.Info("Go heap limited to the budget less the mapped model", "heap_limit_mib", heap/planner.MiB)
}

// checkWiredLimit reads iogpu.wired_limit_mb on a Mac, exports it, shows it in /readyz and
// warns when the planner's limit disagrees with it (wiredlimit.go).
func (d *Daemon) checkWiredLimit(b planner.Budget) {
	mib, ok, err := readWiredLimit()
	if !ok {
		return
	}
	if err != nil {
		d.log.Warn("cannot read iogpu.wired_limit_mb; the planner's limit is not checked against it", "err", err)
		return
	}
	if err := d.reg.Register(d.m.wiredLimit); err != nil {
		d.log.Debug("register redlite_iogpu_wired_limit_bytes", "err", err)
	}
	d.m.wiredLimit.Set(float64(mib * planner.MiB))
	problem := wiredLimitProblem(mib, b)
	detail := fmt.Sprintf("iogpu.wired_limit_mb: %d; planner limit: %d MiB (%s)", mib, b.LimitMiB, b.Source)
	if problem != "" {
		detail += "; warning: " + problem
		d.log.Warn(problem, "iogpu_wired_limit_mb", mib, "limit_mib", b.LimitMiB, "budget_source", b.Source)
	} else {
		d.log.Info("iogpu.wired_limit_mb agrees with the planner's limit", "iogpu_wired_limit_mb", mib, "limit_mib", b.LimitMiB)
	}
	if d.http != nil {
		d.http.detail.Store(&detail)
	}
}

// calibration is REDLITE_CALIBRATION's set, or the default of the backend the model runs on.
func (d *Daemon) calibration(backend string) (planner.Calibration, error) {
	if d.cfg.Calibration == "" {
		c := planner.DefaultCalibration(backend)
		d.log.Info("planning with the backend's default calibration; set REDLITE_CALIBRATION to a set measured on this machine (redlite calibrate)", "calibration", c.Name, "status", c.Status)
		return c, nil
	}
	f, err := os.Open(d.cfg.Calibration)
	if err != nil {
		return planner.Calibration{}, fmt.Errorf("REDLITE_CALIBRATION: %w", err)
	}
	defer f.Close()
	c, err := planner.ReadCalibration(f)
	if err != nil {
		return planner.Calibration{}, fmt.Errorf("REDLITE_CALIBRATION=%s: %w", d.cfg.Calibration, err)
	}
	return c, nil
}

// Shutdown stops the daemon without losing a job. The order matters:
//  1. /readyz turns unready, so that nothing counts on this worker any more;
//  2. the worker stops taking jobs, lets running ones finish within REDLITE_SHUTDOWN_TIMEOUT,
//     has asynq put the others back in their queues, then stops their engine work;
//  3. the HTTP server stops (a scrape during the drain still sees the last metrics);
//  4. the model is closed (no session uses it any more) and the Redis clients last, since
//     the worker and /readyz use them until then.
//
// Calls after the first return at once.
func (d *Daemon) Shutdown() { d.stopOnce.Do(d.shutdown) }

func (d *Daemon) shutdown() {
	if d.http != nil {
		d.http.ready.Store(false)
	}
	if d.cp != nil {
		d.cp.drain() // before the worker stops: clients route elsewhere at once
	}
	if d.sw != nil {
		d.sw.terminate() // a draining worker moves nobody's jobs
	}
	if d.w != nil {
		d.log.Info("shutting down: no new jobs; waiting for running jobs", "timeout", d.cfg.ShutdownTimeout)
		d.w.terminate()
		if d.prefixes != nil {
			d.handOver() // after the worker: nothing more is taken from its own queues
		}
	}
	if d.hb != nil {
		d.hb.terminate() // after the worker: its name stays listed while it drains
	}
	if d.cp != nil {
		d.cp.terminate()
	}
	if d.hooks != nil {
		d.hooks.terminate() // after the worker, which queues deliveries until it stops
	}
	if d.of != nil {
		d.of.terminate()
	}
	if d.http != nil {
		d.http.terminate()
	}
	if d.lm != nil {
		if err := d.lm.close(); err != nil {
			d.log.Warn("close model", "err", err)
		}
	}
	if d.restoreHeapLimit != nil {
		d.restoreHeapLimit()
	}
	d.closeClients()
	d.log.Info("redlited stopped")
}

func (d *Daemon) closeClients() {
	if err := d.client.Close(); err != nil {
		d.log.Debug("close jobs client", "err", err)
	}
	if err := d.rdb.Close(); err != nil {
		d.log.Debug("close redis client", "err", err)
	}
}

// Run starts the daemon, serves until ctx ends (SIGTERM or SIGINT in redlited), then shuts
// it down gracefully.
func Run(ctx context.Context, cfg Config, o Options) error {
	if o.Orphaned == nil {
		o.Orphaned = func() { os.Exit(ExitOrphaned) }
	}
	d, err := New(cfg, o)
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		d.Shutdown()
		return err
	}
	<-ctx.Done()
	d.Shutdown()
	return nil
}

// DefaultCacheDir is where the built-in default model is written: os.UserCacheDir()/redlite.
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find a cache directory for the default model (set REDLITE_CACHE_DIR or REDLITE_MODEL): %w", err)
	}
	return filepath.Join(dir, "redlite"), nil
}

// cacheDir is REDLITE_CACHE_DIR, else DefaultCacheDir.
func (d *Daemon) cacheDir() (string, error) {
	if d.cfg.CacheDir != "" {
		return d.cfg.CacheDir, nil
	}
	return DefaultCacheDir()
}
