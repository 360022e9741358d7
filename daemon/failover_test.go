package daemon

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/internal/redistest"
	"github.com/redlite/batch/jobs"
)

// TestSentinelFailover is issue 18's check: a primary, a replica and three sentinels on
// loopback; a daemon and a client that enqueues jobs continuously, both through
// redis-sentinel://; the primary is killed (SIGKILL) mid-run and the sentinels promote the
// replica. Every job whose enqueue was acknowledged and that the new primary holds runs
// exactly once, with its result readable. What the old primary acknowledged and never
// replicated is lost: nothing when the replica keeps up; with the replica cut off for 2 s
// before the kill, every enqueue of those 2 s without min-replicas-to-write (and the jobs
// that finished then run again: their completion was lost too), and nothing with it (the
// primary refuses writes while no replica is connected).
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis Sentinel failovers (-short skips it)")
	}
	lost := map[string]int{}
	for _, c := range []struct {
		name        string
		minReplicas int  // min-replicas-to-write, with min-replicas-max-lag 1
		hang        bool // cut the replica off for 2 s before killing the primary
	}{
		{"ReplicaInSync", 0, false},
		{"ReplicaHung", 0, true},
		{"ReplicaHungMinReplicas1", 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := []redistest.Option{}
			if c.minReplicas > 0 {
				opts = append(opts, redistest.WithArgs("--min-replicas-to-write", strconv.Itoa(c.minReplicas), "--min-replicas-max-lag", "1"))
			}
			primary := redistest.Start(t, opts...)
			replica := redistest.Start(t, redistest.ReplicaOf(primary))
			const master = "redlite"
			sentinels := redistest.StartSentinels(t, 3, master, primary, 2, redistest.SentinelTiming{DownAfterMS: 1000, FailoverTimeoutMS: 5000})
			sc := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0].Addr()})
			defer sc.Close()
			waitSentinels(t, sc, master)
			rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
			defer rc.Close()
			waitUntil(t, "the replica to sync", func() bool {
				info, err := rc.Info(context.Background(), "replication").Result()
				return err == nil && strings.Contains(info, "master_link_status:up")
			})

			b := setupURL(t, redistest.SentinelURL(sentinels, master, 0))
			var mu sync.Mutex
			runs := map[string]int{} // attempts that began prefilling, per job
			var dequeued []time.Time // when each attempt began
			obs := Observer{PrefillChunk: func(_ context.Context, id string, done, total int) {
				if done <= 512 { // the first chunk of an attempt (prompts here are a few tokens)
					mu.Lock()
					runs[id]++
					dequeued = append(dequeued, time.Now())
					mu.Unlock()
				}
			}}
			startDaemon(t, b.cfg, obs)

			// The client enqueues a small job every 20 ms until stopped, recording which
			// enqueues Redis acknowledged and when.
			var acked []string
			var ackTimes []time.Time
			refused := 0
			stop := make(chan struct{})
			enqueued := make(chan struct{})
			go func() {
				defer close(enqueued)
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					job, err := b.client.Enqueue(ctx, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(4), Temperature: ptr(0.0)},
						jobs.MaxRetry(5))
					cancel()
					mu.Lock()
					if err == nil {
						acked, ackTimes = append(acked, job.ID), append(ackTimes, time.Now())
					} else {
						refused++
					}
					mu.Unlock()
				}
			}()
			waitUntil(t, "jobs to run before the failover", func() bool { mu.Lock(); defer mu.Unlock(); return len(dequeued) >= 20 })

			if c.hang {
				// What the primary acknowledges from now on never reaches the replica: it is
				// stopped, and its replication connection is closed so that nothing waits in
				// its socket buffer either.
				replica.Pause()
				pc := redis.NewClient(&redis.Options{Addr: primary.Addr()})
				if err := pc.ClientKillByFilter(context.Background(), "TYPE", "replica").Err(); err != nil {
					t.Fatal(err)
				}
				pc.Close()
				hung := time.Now()
				waitUntil(t, "the replica to hang for 2 s", func() bool { return time.Since(hung) > 2*time.Second })
			}
			killed := time.Now()
			primary.Kill()
			if c.hang {
				replica.Resume()
			}
			waitUntil(t, "the sentinels to promote the replica", func() bool {
				addr, err := sc.GetMasterAddrByName(context.Background(), master).Result()
				return err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(replica.Port())
			})
			promoted := time.Since(killed)
			waitUntil(t, "jobs to run after the failover", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(dequeued) > 0 && dequeued[len(dequeued)-1].After(killed.Add(promoted)) && len(acked) > 0 && ackTimes[len(ackTimes)-1].After(killed.Add(promoted+time.Second))
			})
			close(stop)
			<-enqueued

			// A job whose dequeue the old primary replicated but whose reply the daemon never
			// got is active with nobody running it: asynq gives it back after its 30 s lease
			// and the recoverer's next pass (every minute), so waiting may take that long.
			var completed []string
			late := 0
			waitAll, cancelAll := context.WithTimeout(context.Background(), orphanWait)
			defer cancelAll()
			for _, id := range acked {
				asked := time.Now()
				res, err := b.client.Wait(waitAll, id, nil)
				if err == nil && time.Since(asked) > 10*time.Second {
					late++ // this job, not the jobs waited for before it, kept us waiting
				}
				switch {
				case errors.Is(err, jobs.ErrNotFound):
					lost[c.name]++ // acknowledged by the old primary, never replicated
				case err != nil:
					t.Errorf("job %s: %v", id, err)
				case res.Usage.CompletionTokens == 0:
					t.Errorf("job %s: result %+v", id, res)
				default:
					completed = append(completed, id)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			reruns := 0
			for _, id := range completed {
				switch {
				case runs[id] == 1:
				case c.hang && runs[id] == 2:
					// It finished while the replica was cut off: the new primary never heard
					// of its completion (nor of its result), so it ran again.
					reruns++
				default:
					t.Errorf("job %s ran %d times", id, runs[id])
				}
			}
			if len(completed) < 20 || !c.hang && lost[c.name] > 0 {
				t.Errorf("%d jobs acknowledged, %d completed, %d lost in the failover", len(acked), len(completed), lost[c.name])
			}
			t.Logf("%s: %d jobs acknowledged, %d refused, %d lost, %d run again, %d recovered only after their lease; "+
				"replica promoted %v after the kill; no enqueue acknowledged for %v, no job started for %v",
				c.name, len(acked), refused, lost[c.name], reruns, late, promoted.Round(10*time.Millisecond),
				longestGap(ackTimes, killed).Round(10*time.Millisecond), longestGap(dequeued, killed).Round(10*time.Millisecond))
		})
	}
	// min-replicas-to-write bounds what a failover loses: the primary stops acknowledging
	// once the replica has been silent for min-replicas-max-lag.
	if t.Failed() {
		return
	}
	if lost["ReplicaHung"] < 10 || lost["ReplicaHungMinReplicas1"] >= lost["ReplicaHung"] {
		t.Errorf("lost %d enqueues with the replica hung, %d with min-replicas-to-write 1: want many, then fewer", lost["ReplicaHung"], lost["ReplicaHungMinReplicas1"])
	}
}

// orphanWait bounds the wait for every job after a failover: asynq's 30 s lease plus its
// recoverer's one-minute period, plus the run.
const orphanWait = 2 * time.Minute

// waitSentinels waits until the sentinels know each other and the replica: before that, a
// failover cannot happen.
func waitSentinels(t *testing.T, sc *redis.SentinelClient, master string) {
	t.Helper()
	waitUntil(t, "the sentinels to find each other and the replica", func() bool {
		m, err := sc.Master(context.Background(), master).Result()
		return err == nil && m["num-other-sentinels"] == "2" && m["num-slaves"] == "1"
	})
}

// longestGap is the longest time between two events that spans the instant at.
func longestGap(times []time.Time, at time.Time) time.Duration {
	ts := append([]time.Time(nil), times...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	for i := 1; i < len(ts); i++ {
		if !ts[i-1].After(at) && ts[i].After(at) {
			return ts[i].Sub(ts[i-1])
		}
	}
	return 0
}

// waitUntil polls cond (state held by other goroutines or processes) until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", waitLimit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFinishedJobNotRunAgain: a job that comes back with its result already written (asynq
// did not record the completion: the worker died, or Redis failed over, in between) is
// completed without running again, and keeps that result.
func TestFinishedJobNotRunAgain(t *testing.T) {
	b := setup(t)
	job := enqueue(t, b.client, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(4)})
	env, err := jobs.EncodeResult(jobs.Result{Text: "from the first attempt", FinishReason: jobs.FinishLength, Worker: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.client.WriteEnvelope(context.Background(), job.Queue, job.ID, env); err != nil {
		t.Fatal(err)
	}
	// A job with progress only (or a cancelled partial result) still runs.
	again := enqueue(t, b.client, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(4)})
	if err := b.client.WriteEnvelope(context.Background(), again.Queue, again.ID, jobs.EncodeProgress(jobs.Progress{Phase: jobs.PhaseDecode, Generated: 2})); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := 0
	startDaemon(t, b.cfg, Observer{PrefillChunk: func(_ context.Context, id string, _, _ int) {
		if id == job.ID {
			mu.Lock()
			ran++
			mu.Unlock()
		}
	}})
	res, err := waitResult(t, b.client, job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran != 0 || res.Text != "from the first attempt" || res.Worker != "gone" {
		t.Errorf("ran %d times, result %+v; want no run and the first attempt's result", ran, res)
	}
	if res, err := waitResult(t, b.client, again.ID, nil); err != nil || res.Worker != b.cfg.WorkerName {
		t.Errorf("job with progress only: %+v, %v; want it run", res, err)
	}
}
