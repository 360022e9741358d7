package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/planner"
)

// worker is the asynq server and the job pipeline it runs (pipeline.go).
type worker struct {
	cfg      Config
	log      *slog.Logger
	m        *metrics
	lm       *loadedModel
	client   *jobs.Client // writes results once a task's context has ended
	insp     *asynq.Inspector
	hb       *heartbeat // records the running jobs (nil in none of the daemon's paths)
	hooks    *webhookSender
	name     string
	budget   planner.Budget
	cal      planner.Calibration
	policy   planner.Policy
	observer Observer
	orphaned func() // Options.Orphaned; nil in tests that run the daemon in-process
	// pool and sched run the jobs together when REDLITE_CONCURRENCY > 1 (batch.go); nil
	// otherwise.
	pool  *planner.Pool
	sched *engine.Scheduler
	// prefixes is the sessions' prefix cache when REDLITE_CONCURRENCY is 1 and
	// REDLITE_PREFIX_CACHE_MIB > 0 (batch.go); nil otherwise.
	prefixes *engine.PrefixStore
	// affinity records the prompts of the jobs it completes, for its capability document
	// (affinity.go); nil when it publishes none.
	affinity *prefixLRU
	// progs holds the compiled response formats (format.go).
	progs programs

	srv *asynq.Server
	// base is the parent of every handler's context. It is cancelled only after asynq has
	// stopped and handed unfinished jobs back, to stop the engine work asynq abandoned.
	base       context.Context
	cancelBase context.CancelCauseFunc
	running    sync.WaitGroup // handlers still executing
	// active maps the jobs whose handlers run to their queues, so that those asynq gives
	// back at shutdown are known (terminate). Once stopping is set, entries stay when their
	// handlers return: asynq cancels the handlers of the jobs it gives back, which may return
	// before its Shutdown does.
	activeMu sync.Mutex
	active   map[string]string
	stopping bool
	// archiving counts the goroutines archiving jobs past their deadline (expire.go); they
	// stop when stopArchiving closes.
	archiving     sync.WaitGroup
	stopArchiving chan struct{}
}

func newWorker(w *worker, rdb redis.UniversalClient) *worker {
	w.base, w.cancelBase = context.WithCancelCause(context.Background())
	w.active = map[string]string{}
	w.stopArchiving = make(chan struct{})
	w.srv = asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:              w.cfg.Concurrency,
		BaseContext:              func() context.Context { return w.base },
		Queues:                   w.cfg.Queues,
		StrictPriority:           w.cfg.StrictPriority,
		RetryDelayFunc:           w.retryDelay,
		IsFailure:                func(err error) bool { return !errors.Is(err, errShuttingDown) && !errors.Is(err, errWaiting) },
		ErrorHandler:             asynq.ErrorHandlerFunc(w.handleError),
		Logger:                   asynqLogger{w.log.With("component", "asynq")},
		LogLevel:                 asynqLevel(w.log),
		ShutdownTimeout:          w.cfg.ShutdownTimeout,
		TaskCheckInterval:        w.cfg.TaskCheckInterval,
		DelayedTaskCheckInterval: w.cfg.DelayedTaskCheckInterval,
	})
	return w
}

func (w *worker) start() error {
	if w.pool != nil {
		if err := w.startBatching(); err != nil {
			return err
		}
	} else if err := w.startPrefixStore(); err != nil {
		return err
	}
	if err := w.srv.Start(w.handler()); err != nil {
		if w.sched != nil {
			w.sched.Close()
		}
		return fmt.Errorf("start asynq server: %w", err)
	}
	return nil
}

// terminate stops taking jobs and lets running ones finish within the shutdown timeout;
// asynq then puts the unfinished ones back in their queues (nothing is lost). Only after
// that are their handlers cancelled, so that a handler never sees its job cancelled while
// asynq could still count the attempt as failed; the engine stops within a chunk or token,
// and terminate returns when every handler has, so the model can be closed.
func (w *worker) terminate() {
	w.activeMu.Lock()
	w.stopping = true
	w.activeMu.Unlock()
	w.srv.Shutdown()
	w.restartWaits()
	w.cancelBase(errShuttingDown)
	w.running.Wait()
	if w.sched != nil {
		w.sched.Close() // every handler has returned: nothing is waiting on it
	}
	// After the server: asynq may still report a failed attempt while it shuts down.
	close(w.stopArchiving)
	w.archiving.Wait()
}

// track records that a handler runs job id of queue until the returned func is called.
func (w *worker) track(queue, id string) (untrack func()) {
	w.activeMu.Lock()
	w.active[id] = queue
	w.activeMu.Unlock()
	return func() {
		w.activeMu.Lock()
		if !w.stopping {
			delete(w.active, id)
		}
		w.activeMu.Unlock()
	}
}

// restartWaits records, for the jobs whose handlers ran when the worker began to stop (asynq
// has given back those it did not finish, without the pending_since it dropped when it took
// them; a finished job is not pending and is left alone), that they wait from now: a job
// waiting longer than REDLITE_CAPABILITY_TTL in a queue no live worker serves is moved or
// archived by the other workers (stranded.go), and a worker that restarts within the TTL
// finds its jobs still there.
func (w *worker) restartWaits() {
	w.activeMu.Lock()
	given := maps.Clone(w.active)
	w.activeMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for id, queue := range given {
		if err := w.client.RestartWait(ctx, queue, id); err != nil {
			w.log.Debug("record a requeued job's wait", "job", id, "err", err)
		}
	}
}

// retryDelay is asynq's back-off for a failed attempt: RetryDelay doubled per retry up to
// MaxRetryDelay. A job whose deadline has passed is parked for expiredRetryDelay instead:
// handleError archives it as soon as asynq has moved it to retry (expire.go). A job whose
// worker died (asynq's recoverer found its lease expired) runs again at once: the job did
// nothing wrong, and the attempt still counts, so one that kills its worker every time is
// archived after its retries all the same.
func (w *worker) retryDelay(n int, err error, t *asynq.Task) time.Duration {
	if pastDeadline(t, err) {
		return expiredRetryDelay
	}
	if errors.Is(err, asynq.ErrLeaseExpired) {
		return 0
	}
	if errors.Is(err, errWaiting) {
		return w.cfg.HierarchyPoll
	}
	d := w.cfg.RetryDelay
	for i := 0; i < n && d < w.cfg.MaxRetryDelay; i++ {
		d *= 2
	}
	return min(d, w.cfg.MaxRetryDelay)
}
