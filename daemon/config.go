package daemon

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redlite/batch/engine/chat"
	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/internal/envconf"
	"github.com/redlite/batch/internal/redisx"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/metalkit"
	"github.com/redlite/batch/planner"
)

// Config is the daemon's configuration, read from REDLITE_* environment variables. Every
// default is in the envDefault tag and in docs/configuration.md; an empty variable means the default.
type Config struct {
	// The Redis connection: REDLITE_REDIS_URL and its TLS files.
	redisx.Env
	// Model is the GGUF file to serve. Empty means the built-in default model (random
	// weights: its output is meaningless text), written to CacheDir on first use.
	Model string `env:"REDLITE_MODEL"`
	// ModelName is the name results report and payloads' "model" is matched against.
	// Empty means the GGUF's general.name, or the file name without .gguf.
	ModelName string `env:"REDLITE_MODEL_NAME"`
	// ChatTemplate names a built-in chat template (chatml, qwen3) to use instead of the
	// GGUF's own, for a file without one or with one that cannot render a plain
	// conversation; empty uses the file's.
	ChatTemplate string `env:"REDLITE_CHAT_TEMPLATE"`
	// CacheDir holds the built-in default model. Empty means os.UserCacheDir()/redlite.
	CacheDir string `env:"REDLITE_CACHE_DIR"`
	// Queues maps queue names to weights ("critical=6,default=3,low=1"). Empty means
	// jobs.QueueWeights().
	Queues map[string]int `env:"REDLITE_QUEUES" envSeparator:"," envKeyValSeparator:"="`
	// StrictPriority empties higher-weight queues before looking at lower ones.
	StrictPriority bool `env:"REDLITE_STRICT_PRIORITY" envDefault:"false"`
	// Concurrency is the number of jobs run at once: above 1, the sequences of one batch
	// scheduler sharing a KV pool (batch.go); 1 runs each job alone in a session planned for
	// it (the only mode with MTP and a per-job expert cache).
	Concurrency int `env:"REDLITE_CONCURRENCY" envDefault:"4"`
	// Backend runs the engine: auto (Metal on a Mac with a Metal device, else the CPU),
	// cpu, metal, or metal-harness (the Metal kernels run on the CPU: tests, Linux).
	Backend string `env:"REDLITE_BACKEND" envDefault:"auto"`
	// CPUDot is the CPU backend's dot path for quantized products: auto, exact or int8
	// (cpu.ParseDot).
	CPUDot string `env:"REDLITE_CPU_DOT" envDefault:"auto"`
	// Threads for the CPU backend; 0 means one per core.
	Threads int `env:"REDLITE_THREADS" envDefault:"0"`
	// The Metal backend's switches: REDLITE_METAL_MPS, REDLITE_METAL_FUSED_TAIL,
	// REDLITE_METAL_BATCH_ATTENTION.
	metalkit.Switches

	// KV forces the KV cache precision: auto (the planner chooses), f32, f16 or q8_0.
	KV string `env:"REDLITE_KV" envDefault:"auto"`
	// MaxChunk caps the prefill chunk in tokens; 0 means the planner's largest (2048).
	MaxChunk int `env:"REDLITE_MAX_CHUNK" envDefault:"0"`
	// DisableMTP keeps multi-token prediction off.
	DisableMTP bool `env:"REDLITE_DISABLE_MTP" envDefault:"false"`
	// PlanPreference orders the planner's choices among plans that fit.
	PlanPreference string `env:"REDLITE_PLAN_PREFERENCE" envDefault:"kv,mtp,chunk"`
	// GPULimitMiB overrides the device's memory limit; 0 means the device's own
	// (macOS: the Metal limit) or, on Linux, RAMFraction of physical memory.
	GPULimitMiB int64 `env:"REDLITE_GPU_LIMIT_MIB" envDefault:"0"`
	// RAMFraction is the share of physical memory a Linux worker plans into.
	RAMFraction float64 `env:"REDLITE_RAM_FRACTION" envDefault:"0.75"`
	// MarginMiB is kept free below the limit.
	MarginMiB int64 `env:"REDLITE_MARGIN_MIB" envDefault:"0"`
	// Calibration is a JSON file of backend constants (planner.Calibration); empty means
	// the built-in CPU placeholder.
	Calibration string `env:"REDLITE_CALIBRATION"`

	// PrefixCacheMiB bounds a batching worker's prefix cache (REDLITE_CONCURRENCY > 1) in
	// memory beside its KV pool: a hybrid model's recurrent checkpoints (a dense model's
	// cached prefixes are blocks of the pool itself). The planner plans the pool around it.
	// 0 turns the prefix cache off.
	PrefixCacheMiB int64 `env:"REDLITE_PREFIX_CACHE_MIB" envDefault:"512"`
	// PrefixCacheDir receives the prefixes evicted from memory, as state snapshots, at most
	// PrefixCacheDiskMiB of them; a restarted worker reads them again. Empty: none on disk.
	PrefixCacheDir     string `env:"REDLITE_PREFIX_CACHE_DIR"`
	PrefixCacheDiskMiB int64  `env:"REDLITE_PREFIX_CACHE_DISK_MIB" envDefault:"4096"`
	// PrefixAffinity publishes, while the prefix cache is on, keys of the prompts the worker
	// ran, and serves its own queues, to which clients route jobs sharing them (affinity.go).
	PrefixAffinity bool `env:"REDLITE_PREFIX_AFFINITY" envDefault:"true"`

	// HTTPAddr serves /healthz, /readyz and /metrics; "off" disables it.
	HTTPAddr string `env:"REDLITE_HTTP_ADDR" envDefault:":9464"`
	// ShutdownTimeout is how long a running job may go on after SIGTERM before it is
	// handed back to its queue.
	ShutdownTimeout time.Duration `env:"REDLITE_SHUTDOWN_TIMEOUT" envDefault:"15s"`
	// RetryDelay is the first back-off after an engine fault; it doubles per retry, up to
	// MaxRetryDelay.
	RetryDelay    time.Duration `env:"REDLITE_RETRY_DELAY" envDefault:"10s"`
	MaxRetryDelay time.Duration `env:"REDLITE_MAX_RETRY_DELAY" envDefault:"10m"`
	// ProgressInterval is the least time between two progress writes of one job.
	ProgressInterval time.Duration `env:"REDLITE_PROGRESS_INTERVAL" envDefault:"250ms"`
	// StreamInterval is the time slice of a job's text stream (jobs.TextStreamKey): a token
	// less than this after the last append waits for the slice's end and goes in one entry
	// with the others that came meanwhile, so a generating job costs Redis at most
	// 1/StreamInterval round trips a second; slower tokens go out one by one at once. Zero:
	// an entry per token, however fast.
	StreamInterval time.Duration `env:"REDLITE_STREAM_INTERVAL" envDefault:"5ms"`
	// TaskCheckInterval is how often an idle worker looks for new jobs (asynq polls).
	TaskCheckInterval time.Duration `env:"REDLITE_TASK_CHECK_INTERVAL" envDefault:"1s"`
	// DelayedTaskCheckInterval is how often retrying and scheduled jobs are moved to their
	// queue when due.
	DelayedTaskCheckInterval time.Duration `env:"REDLITE_DELAYED_TASK_CHECK_INTERVAL" envDefault:"5s"`
	// ResultWriteTimeout bounds how long a finished job retries writing its result while
	// Redis is away (a restart, a failover) before the attempt counts as failed. Keep it
	// below asynq's 30 s lease, after which another worker may run the job again.
	ResultWriteTimeout time.Duration `env:"REDLITE_RESULT_WRITE_TIMEOUT" envDefault:"20s"`
	// AdmissionTimeout bounds how long a job of a batching worker (REDLITE_CONCURRENCY > 1)
	// waits in the worker for a slot and the KV blocks of its prompt + max_tokens; past it
	// the attempt fails without running and the job is retried (perhaps by another worker).
	AdmissionTimeout time.Duration `env:"REDLITE_ADMISSION_TIMEOUT" envDefault:"10m"`
	// HierarchyPoll is how long a hierarchical summary's parent waits between two checks of
	// its child jobs (it holds no engine slot meanwhile); a check runs once the delay has
	// passed and REDLITE_DELAYED_TASK_CHECK_INTERVAL has moved the job back to its queue.
	HierarchyPoll time.Duration `env:"REDLITE_HIERARCHY_POLL" envDefault:"2s"`
	// WebhookTimeout bounds one POST of a result to a payload's webhook_url.
	WebhookTimeout time.Duration `env:"REDLITE_WEBHOOK_TIMEOUT" envDefault:"10s"`
	// REDLITE_WEBHOOK_SECRET, _SECRET_FILE and _ALLOW.
	jobs.WebhookEnv
	// WebhookRetryDelay is the first back-off after a failed delivery; it doubles per
	// attempt up to 5m, or is what the receiver's Retry-After asks if that is longer.
	WebhookRetryDelay time.Duration `env:"REDLITE_WEBHOOK_RETRY_DELAY" envDefault:"2s"`
	// WebhookRetryFor is how long after the first attempt a delivery is retried.
	WebhookRetryFor time.Duration `env:"REDLITE_WEBHOOK_RETRY_FOR" envDefault:"1h"`
	// WorkerName is what results report as "worker"; empty means the host name.
	WorkerName string `env:"REDLITE_WORKER_NAME"`
	// CapabilityTTL is how long the worker's capability document outlives its last refresh
	// (refreshed every TTL/6): a worker that dies stops being routed to within it.
	CapabilityTTL time.Duration `env:"REDLITE_CAPABILITY_TTL" envDefault:"30s"`

	// REDLITE_LOG_FORMAT and REDLITE_LOG_LEVEL.
	envconf.Log
}

// ConfigFromEnv reads the configuration from environ (os.Environ() form, "KEY=value"), fills
// defaults and validates it. Errors name the variable.
func ConfigFromEnv(environ []string) (Config, error) {
	cfg, err := envconf.Parse[Config](environ)
	if err != nil {
		return Config{}, err
	}
	if len(cfg.Queues) == 0 {
		cfg.Queues = jobs.QueueWeights()
	}
	return cfg, cfg.Validate()
}

// DefaultConfig is the configuration of an empty environment.
func DefaultConfig() Config {
	cfg, err := ConfigFromEnv(nil)
	if err != nil {
		panic("daemon: the defaults do not validate: " + err.Error()) // a bug in the tags
	}
	return cfg
}

// Validate reports the first setting that cannot work, naming its variable.
func (c Config) Validate() error {
	bad := func(name, format string, args ...any) error {
		return fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
	}
	if _, err := c.URL(); err != nil {
		return err
	}
	if len(c.Queues) == 0 {
		return bad("REDLITE_QUEUES", "no queues; want name=weight pairs like critical=6,default=3,low=1")
	}
	for q, w := range c.Queues {
		if q == "" || w < 1 {
			return bad("REDLITE_QUEUES", "queue %q has weight %d; want a name and a weight ≥ 1", q, w)
		}
	}
	if _, err := cpu.ParseDot(c.CPUDot); err != nil {
		return bad("REDLITE_CPU_DOT", "%v", err)
	}
	if _, err := metalkit.ParseKind(c.Backend); err != nil {
		return bad("REDLITE_BACKEND", "%v", err)
	}
	if c.CapabilityTTL < time.Second {
		return bad("REDLITE_CAPABILITY_TTL", "must be at least 1s, got %v", c.CapabilityTTL)
	}
	switch {
	case c.Concurrency < 1 || c.Concurrency > planner.MaxSlots:
		return bad("REDLITE_CONCURRENCY", "must be between 1 and %d, got %d", planner.MaxSlots, c.Concurrency)
	case c.Threads < 0:
		return bad("REDLITE_THREADS", "must be ≥ 0 (0: one per core), got %d", c.Threads)
	case c.MaxChunk < 0:
		return bad("REDLITE_MAX_CHUNK", "must be ≥ 0 (0: no cap), got %d", c.MaxChunk)
	case c.GPULimitMiB < 0:
		return bad("REDLITE_GPU_LIMIT_MIB", "must be ≥ 0 (0: the device's limit), got %d", c.GPULimitMiB)
	case !(c.RAMFraction > 0 && c.RAMFraction <= 1):
		return bad("REDLITE_RAM_FRACTION", "must be within (0, 1], got %v", c.RAMFraction)
	case c.MarginMiB < 0:
		return bad("REDLITE_MARGIN_MIB", "must be ≥ 0, got %d", c.MarginMiB)
	case c.GPULimitMiB > 0 && c.MarginMiB >= c.GPULimitMiB:
		return bad("REDLITE_MARGIN_MIB", "%d leaves nothing of REDLITE_GPU_LIMIT_MIB %d", c.MarginMiB, c.GPULimitMiB)
	case c.ShutdownTimeout <= 0:
		return bad("REDLITE_SHUTDOWN_TIMEOUT", "must be > 0, got %v", c.ShutdownTimeout)
	case c.RetryDelay <= 0:
		return bad("REDLITE_RETRY_DELAY", "must be > 0, got %v", c.RetryDelay)
	case c.MaxRetryDelay < c.RetryDelay:
		return bad("REDLITE_MAX_RETRY_DELAY", "%v is below REDLITE_RETRY_DELAY %v", c.MaxRetryDelay, c.RetryDelay)
	case c.ProgressInterval <= 0:
		return bad("REDLITE_PROGRESS_INTERVAL", "must be > 0, got %v", c.ProgressInterval)
	case c.StreamInterval < 0:
		return bad("REDLITE_STREAM_INTERVAL", "must be ≥ 0, got %v", c.StreamInterval)
	case c.TaskCheckInterval <= 0:
		return bad("REDLITE_TASK_CHECK_INTERVAL", "must be > 0, got %v", c.TaskCheckInterval)
	case c.DelayedTaskCheckInterval <= 0:
		return bad("REDLITE_DELAYED_TASK_CHECK_INTERVAL", "must be > 0, got %v", c.DelayedTaskCheckInterval)
	case c.ResultWriteTimeout <= 0:
		return bad("REDLITE_RESULT_WRITE_TIMEOUT", "must be > 0, got %v", c.ResultWriteTimeout)
	case c.WebhookTimeout <= 0:
		return bad("REDLITE_WEBHOOK_TIMEOUT", "must be > 0, got %v", c.WebhookTimeout)
	case c.AdmissionTimeout <= 0:
		return bad("REDLITE_ADMISSION_TIMEOUT", "must be > 0, got %v", c.AdmissionTimeout)
	case c.HierarchyPoll <= 0:
		return bad("REDLITE_HIERARCHY_POLL", "must be > 0, got %v", c.HierarchyPoll)
	case c.WebhookRetryDelay <= 0:
		return bad("REDLITE_WEBHOOK_RETRY_DELAY", "must be > 0, got %v", c.WebhookRetryDelay)
	case c.PrefixCacheMiB < 0:
		return bad("REDLITE_PREFIX_CACHE_MIB", "must be ≥ 0 (0: no prefix cache), got %d", c.PrefixCacheMiB)
	case c.PrefixCacheDiskMiB < 0:
		return bad("REDLITE_PREFIX_CACHE_DISK_MIB", "must be ≥ 0, got %d", c.PrefixCacheDiskMiB)
	case c.PrefixCacheDir != "" && c.PrefixCacheDiskMiB == 0:
		return bad("REDLITE_PREFIX_CACHE_DISK_MIB", "is 0 but REDLITE_PREFIX_CACHE_DIR is set: give the directory a bound, or unset it")
	case c.PrefixCacheDir != "" && c.PrefixCacheMiB == 0:
		return bad("REDLITE_PREFIX_CACHE_DIR", "is set but REDLITE_PREFIX_CACHE_MIB is 0, which turns the prefix cache off")
	case c.WebhookRetryFor < 0:
		return bad("REDLITE_WEBHOOK_RETRY_FOR", "must be ≥ 0 (0: one attempt), got %v", c.WebhookRetryFor)
	}
	if _, err := c.Secret(); err != nil {
		return err
	}
	if _, err := c.policy(); err != nil {
		return err
	}
	if c.HTTPAddr != "off" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return bad("REDLITE_HTTP_ADDR", "want host:port, :port or off, got %q: %v", c.HTTPAddr, err)
		}
	}
	if c.ChatTemplate != "" {
		if _, err := chat.Builtin(c.ChatTemplate); err != nil {
			return bad("REDLITE_CHAT_TEMPLATE", "want one of %s, got %q", strings.Join(chat.BuiltinNames(), ", "), c.ChatTemplate)
		}
	}
	return c.Log.Check()
}

// policy is the planner policy the KV, chunk, MTP and preference settings make.
func (c Config) policy() (planner.Policy, error) {
	// With REDLITE_CONCURRENCY > 1 the expert cache is the pool's, sized once for every job
	// (planner.PlanPool); each job is then planned with the pool's residency (batchPolicy).
	p := planner.Policy{MaxChunk: c.MaxChunk, DisableMTP: c.DisableMTP, ExpertCache: planner.CacheAuto}
	if c.Concurrency > 1 {
		// A batching worker's prefix cache is planned beside its pool (planner.PlanPool).
		p.PrefixCacheMiB = c.PrefixCacheMiB
	}
	if c.KV != "auto" {
		prec, err := ml.ParseDType(c.KV)
		if err != nil {
			return p, fmt.Errorf("REDLITE_KV: want auto, f32, f16 or q8_0, got %q", c.KV)
		}
		p.KV = &prec
	}
	pref, err := planner.ParsePreference(c.PlanPreference)
	if err != nil {
		return p, fmt.Errorf("REDLITE_PLAN_PREFERENCE: %w", err)
	}
	p.Preference = pref
	if c.MaxChunk > 0 && c.MaxChunk < planner.CPUPlaceholder().MinChunk && c.Calibration == "" {
		return p, fmt.Errorf("REDLITE_MAX_CHUNK: %d is below the smallest chunk %d", c.MaxChunk, planner.CPUPlaceholder().MinChunk)
	}
	return p, nil
}
