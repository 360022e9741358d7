package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/jobs"
)

// The worker publishes its jobs.Identity beside asynq's heartbeat (jobs.Workers joins the two).

const (
	identityInterval = 5 * time.Second  // asynq's heartbeat interval
	identityTTL      = 30 * time.Second // asynq's heartbeat expiry
)

// heartbeat publishes the worker's identity every identityInterval until terminate.
type heartbeat struct {
	rdb  redis.UniversalClient
	key  string
	jobs string // jobs.WorkerJobsKey
	val  []byte
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}
	// started is set by start.
	started bool
}

func newHeartbeat(rdb redis.UniversalClient, id jobs.Identity, log *slog.Logger) (*heartbeat, error) {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host" // as asynq does
	}
	val, err := json.Marshal(id)
	if err != nil {
		return nil, err
	}
	return &heartbeat{rdb: rdb, key: jobs.IdentityKey(host, os.Getpid()), jobs: jobs.WorkerJobsKey(host, os.Getpid()), val: val, log: log,
		stop: make(chan struct{}), done: make(chan struct{})}, nil
}

func (h *heartbeat) start() {
	h.started = true
	go func() {
		defer close(h.done)
		tick := time.NewTicker(identityInterval)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), identityInterval)
			if err := h.rdb.Set(ctx, h.key, h.val, identityTTL).Err(); err != nil {
				h.log.Debug("publish the worker's identity", "err", err)
			}
			h.rdb.Expire(ctx, h.jobs, identityTTL)
			cancel()
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
}

// attemptMember names an attempt in the worker's record of running jobs: the job id, a space
// and the number of failed attempts before it. The attempt, not the job: once a dead worker's
// job runs again elsewhere, the record of the dead attempt must not touch the new one.
func attemptMember(id string, retried int) string { return id + " " + strconv.Itoa(retried) }

// parseAttemptMember reads attemptMember's form (the id may hold spaces).
func parseAttemptMember(m string) (id string, retried int64, ok bool) {
	i := strings.LastIndexByte(m, ' ')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.ParseInt(m[i+1:], 10, 32)
	return m[:i], n, err == nil && n >= 0
}

// claim records that the worker runs an attempt (attemptMember); release forgets it. Best
// effort: without the record, a job of a worker that dies is recovered by its lease
// (orphans.go).
func (h *heartbeat) claim(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := h.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, h.jobs, id)
		p.Expire(ctx, h.jobs, identityTTL)
		return nil
	}); err != nil {
		h.log.Debug("record a running job", "job", id, "err", err)
	}
}

func (h *heartbeat) release(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h.rdb.SRem(ctx, h.jobs, id)
}

// terminate stops publishing and removes the key (a worker that dies lets it expire).
func (h *heartbeat) terminate() {
	close(h.stop)
	if h.started { // a daemon whose start failed never started it
		<-h.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = h.rdb.Del(ctx, h.key, h.jobs).Err()
}
