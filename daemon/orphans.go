package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/internal/redisx"
	"github.com/redlite/batch/jobs"
)

// A job whose worker dies (kill -9, power loss) stays active, leased to the dead worker.
// asynq v0.26 gives it back only when its recoverer, which runs when a server starts and
// then every minute (fixed), finds a lease that expired more than 30 s ago (fixed, for
// clock skew); leases last 30 s (fixed) and live workers extend them every heartbeat (5 s).
// None of the three is configurable, so on its own asynq re-runs such a job 60–120 s after
// the death (measured: 90–100 s).
//
// The orphan finder of every worker looks every orphanInterval for jobs it can prove
// orphaned and sends each to asynq's retry set itself, as asynq's recoverer would
// (jobs.RetryOrphan: one more failed attempt, "lease expired"); retryDelay lets it run at
// once, and asynq's forwarder makes it pending within REDLITE_DELAYED_TASK_CHECK_INTERVAL.
// Heartbeats decide which jobs are orphaned:
//   - held by a worker process of this host that no longer exists (a worker restarted by
//     launchd or Docker: its predecessor's PID is gone, or is our own PID in a container
//     and the predecessor started before us): proven at once;
//   - no live worker lists it in its heartbeat and its lease has not been extended for
//     orphanLeaseAge (three missed heartbeats): a dead worker on another host. A worker
//     that is merely slow still heartbeats, lists its jobs and extends their leases, and
//     RetryOrphan acts only under the lease as read, so an extension in between keeps the
//     job where it is.
// So the job runs again 15–25 s after its worker's last heartbeat, and of several finders
// only one moves it. A job whose retries are spent has its lease moved back instead
// (leaseBackdate), past asynq's 30 s skew allowance: asynq's recoverer archives it at its
// next run, as it would have.

const (
	leaseDuration  = 30 * time.Second // asynq's rdb.LeaseDuration
	orphanLeaseAge = 15 * time.Second // three heartbeats without an extension
	leaseBackdate  = 61 * time.Second // past asynq's expiry + 30 s skew cutoff
	orphanInterval = 5 * time.Second  // how often the finder looks (asynq's heartbeat)
)

// processStart tells this process's asynq server apart from a predecessor that had the
// same PID (PID 1 in a container).
var processStart = time.Now()

// orphanFinder retries the jobs whose worker is provably gone.
type orphanFinder struct {
	rdb    redis.UniversalClient
	client *jobs.Client
	insp   *asynq.Inspector
	queues []string
	host   string
	log    *slog.Logger
	stop   chan struct{}
	done   chan struct{}
}

func newOrphanFinder(rdb redis.UniversalClient, client *jobs.Client, insp *asynq.Inspector, queues map[string]int, log *slog.Logger) (*orphanFinder, error) {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host" // as asynq does
	}
	f := &orphanFinder{rdb: rdb, client: client, insp: insp, host: host, log: log.With("component", "orphans"),
		stop: make(chan struct{}), done: make(chan struct{})}
	for q := range queues {
		f.queues = append(f.queues, q)
	}
	return f, nil
}

// start looks once, then every orphanInterval until terminate.
func (f *orphanFinder) start() {
	go func() {
		defer close(f.done)
		tick := time.NewTicker(orphanInterval)
		defer tick.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-tick.C:
				f.sweep(context.Background(), false)
			}
		}
	}()
}

func (f *orphanFinder) terminate() {
	close(f.stop)
	<-f.done
}

// sweep retries the jobs it can prove orphaned and returns how many.
// atStart is true for the sweep before this process's asynq server starts, when a record of
// running jobs under our own PID can only be a predecessor's (PID 1 in a container).
func (f *orphanFinder) sweep(ctx context.Context, atStart bool) int {
	ctx, cancel := context.WithTimeout(ctx, orphanInterval)
	defer cancel()
	servers, err := f.insp.Servers()
	if err != nil {
		f.log.Debug("list workers", "err", err)
		return 0
	}
	claimed := map[string]bool{} // task ids live workers hold
	for _, s := range servers {
		gone := s.Host == f.host && (s.PID == os.Getpid() && s.Started.Before(processStart) ||
			s.PID != os.Getpid() && !processAlive(s.PID))
		if gone {
			// Its listing outlives it by up to 10 s, by which time the job may run again
			// elsewhere: the proof of a dead attempt is its record below.
			continue
		}
		for _, w := range s.ActiveWorkers {
			claimed[w.TaskID] = true
		}
	}
	dead := map[string]int64{} // the attempts of worker processes of this host that are gone
	// The running jobs each worker process of this host recorded when they started
	// (heartbeat.go): asynq lists a worker's jobs only with its next heartbeat.
	prefix := "redlite:worker:" + f.host + ":"
	iter := f.rdb.Scan(ctx, 0, prefix+"*:jobs", 100).Iterator()
	var deadKeys []string
	for iter.Next(ctx) {
		key := iter.Val()
		pid, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(key, prefix), ":jobs"))
		if err != nil || key != jobs.WorkerJobsKey(f.host, pid) {
			continue
		}
		if pid == os.Getpid() && !atStart || pid != os.Getpid() && processAlive(pid) {
			continue
		}
		ids, err := f.rdb.SMembers(ctx, key).Result()
		if err != nil {
			continue
		}
		for _, m := range ids {
			if id, retried, ok := parseAttemptMember(m); ok {
				dead[id] = retried
			}
		}
		deadKeys = append(deadKeys, key)
	}
	now := time.Now()
	stale := float64(now.Add(leaseDuration - orphanLeaseAge).Unix())
	// Every queue, not only this worker's: a dead worker of this host may have served other
	// classes' queues, and its record of running jobs is deleted below once read; asynq's
	// forwarder of whichever worker serves a queue makes the retried job pending.
	queues := f.queues
	if all, err := f.rdb.SMembers(ctx, redisx.AllQueues).Result(); err == nil {
		queues = all
	}
	n := 0
	for _, q := range queues {
		key := redisx.LeaseKey(q)
		leases, err := f.rdb.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Min: "-inf", Max: "+inf"}).Result()
		if err != nil {
			f.log.Debug("read leases", "queue", q, "err", err)
			continue
		}
		for _, z := range leases {
			id, _ := z.Member.(string)
			attempt, isDead := dead[id]
			if claimed[id] || !isDead && z.Score > stale {
				continue
			}
			why := "its worker process on this host is gone"
			if !isDead {
				why = "no live worker holds it and its lease has not been extended for " + orphanLeaseAge.String()
				attempt = -1
			}
			err := f.client.RetryOrphan(ctx, q, id, z.Score, attempt, asynq.ErrLeaseExpired.Error())
			switch {
			case err == nil:
				f.log.Info("job orphaned by a dead worker: sent to retry", "job", id, "queue", q, "why", why)
				n++
			case errors.Is(err, jobs.ErrRetriesSpent):
				if f.backdate(ctx, key, id, z.Score, now) {
					f.log.Info("job orphaned by a dead worker: no retries left, handed to asynq's recoverer to archive", "job", id, "queue", q, "why", why)
					n++
				}
			case !errors.Is(err, jobs.ErrNotActive): // not active: finished, or a live worker's
				f.log.Debug("retry an orphaned job", "job", id, "err", err)
			}
		}
	}
	if len(deadKeys) > 0 {
		f.rdb.Del(ctx, deadKeys...)
	}
	return n
}

// backdate moves the lease of job id in lease set key back past asynq's skew allowance, so
// that asynq's recoverer takes the job at its next run.
func (f *orphanFinder) backdate(ctx context.Context, key, id string, score float64, now time.Time) bool {
	back := float64(now.Add(-leaseBackdate).Unix())
	if score <= back {
		return false // asynq's recoverer will take it as it is
	}
	// XX: only a lease that still exists (the job may have just finished).
	if err := f.rdb.ZAddXX(ctx, key, redis.Z{Score: back, Member: id}).Err(); err != nil {
		f.log.Debug("move a lease back", "job", id, "err", err)
		return false
	}
	return true
}

// processAlive says whether a process with pid exists (signal 0; EPERM means it exists but
// is another user's).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
