package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/internal/buildinfo"
)

// asynq's server list (Inspector.Servers, asynqmon's Servers page) names a worker by the
// host name and PID its heartbeat reads from the OS; asynq v0.26 has no setting for a name.
// So a worker publishes its Identity (REDLITE_WORKER_NAME, model, build) beside asynq's
// heartbeat, under a key made of the same host and PID, refreshed and expiring as asynq's
// is, and Workers joins the two.

// IdentityKey is the Redis key of the worker process on host with pid.
func IdentityKey(host string, pid int) string { return fmt.Sprintf("redlite:worker:%s:%d", host, pid) }

// WorkerJobsKey is the set of the attempts the worker process on host with pid is running,
// each "<job id> <failed attempts before it>": written when an attempt starts, before the
// engine runs (asynq's own list of a worker's jobs is written only with its next heartbeat),
// so that a restarted worker can prove them orphaned.
func WorkerJobsKey(host string, pid int) string { return IdentityKey(host, pid) + ":jobs" }

// Identity is what a worker publishes about itself under IdentityKey.
type Identity struct {
	Name    string         `json:"name"`
	Model   string         `json:"model"`
	Backend string         `json:"backend"`
	Build   buildinfo.Info `json:"build"`
}

// WorkerServer is one worker process as asynq's heartbeat describes it (the heartbeat is
// refreshed every 5 s and expires 30 s after a worker stops sending it).
type WorkerServer struct {
	ID string `json:"id"`
	// Name is the worker's REDLITE_WORKER_NAME (empty for a worker that publishes none).
	Name        string         `json:"name"`
	Version     string         `json:"version,omitempty"`
	Model       string         `json:"model,omitempty"`
	Backend     string         `json:"backend,omitempty"`
	Host        string         `json:"host"`
	PID         int            `json:"pid"`
	Concurrency int            `json:"concurrency"`
	Queues      map[string]int `json:"queues"`
	Strict      bool           `json:"strict_priority"`
	Started     time.Time      `json:"started"`
	Status      string         `json:"status"` // asynq's: active, stopped, closed
	Active      []ActiveJob    `json:"active"`
	// From the worker's capability document (capabilities.go); empty when it publishes none.
	GPULimitMiB int64 `json:"gpu_limit_mib,omitempty"`
	MaxContext  int   `json:"max_context,omitempty"`
	// ExpertResidency and ExpertCacheMiB: the batching worker's (Capability).
	ExpertResidency string    `json:"expert_residency,omitempty"`
	ExpertCacheMiB  int64     `json:"expert_cache_mib,omitempty"`
	Draining        bool      `json:"draining"`
	LastHeartbeat   time.Time `json:"last_heartbeat"`
}

// ActiveJob is a job a worker is running.
type ActiveJob struct {
	// ID is empty where redlite-api lists another tenant's job.
	ID       string    `json:"id,omitempty"`
	Type     string    `json:"type"`
	Queue    string    `json:"queue"`
	Started  time.Time `json:"started"`
	Deadline time.Time `json:"deadline"`
	// Progress is what the worker last published (nil before its first write).
	Progress *Progress `json:"progress,omitempty"`
}

// Workers lists the worker servers registered in the Redis at redisURL, by name, host and
// PID, with their capabilities and the progress of their running jobs: Client.Workers on a
// client made for the call.
func Workers(redisURL string, tlsFiles TLSFiles) ([]WorkerServer, error) {
	c, err := NewClient(redisURL, WithTLSFiles(tlsFiles))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Workers(context.Background())
}

// Workers lists the worker servers (see the function Workers).
func (c *Client) Workers(ctx context.Context) ([]WorkerServer, error) {
	client, insp, rdb := c, c.insp, c.rdb
	servers, err := insp.Servers()
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	caps, err := client.Capabilities(ctx)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	out := make([]WorkerServer, 0, len(servers))
	for _, s := range servers {
		w := WorkerServer{ID: s.ID, Host: s.Host, PID: s.PID, Concurrency: s.Concurrency, Queues: s.Queues,
			Strict: s.StrictPriority, Started: s.Started, Status: s.Status, Active: []ActiveJob{}}
		// The identity heartbeat.go publishes beside asynq's heartbeat.
		if b, err := rdb.Get(ctx, IdentityKey(s.Host, s.PID)).Bytes(); err == nil {
			var id Identity
			if json.Unmarshal(b, &id) == nil {
				w.Name, w.Version, w.Model, w.Backend = id.Name, id.Build.Version, id.Model, id.Backend
			}
		} else if !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		for _, c := range caps {
			// Several daemons in one process (tests) share host and PID; the queues tell them apart.
			if c.Host == s.Host && c.PID == s.PID && sameQueues(c.Queues, s.Queues) {
				w.Name, w.Model, w.Backend, w.GPULimitMiB, w.MaxContext, w.Draining, w.LastHeartbeat =
					c.Worker, c.Model, c.Backend, c.GPULimitMiB, c.MaxContext, c.Draining, c.Updated
				w.ExpertResidency, w.ExpertCacheMiB = c.ExpertResidency, c.ExpertCacheMiB
			}
		}
		for _, a := range s.ActiveWorkers {
			j := ActiveJob{ID: a.TaskID, Type: a.TaskType, Queue: a.Queue, Started: a.Started, Deadline: a.Deadline}
			if st, err := client.Status(ctx, a.TaskID); err == nil && st.State == StateActive && st.Progress != nil {
				// Counts only: the list shows every tenant's running jobs, never their text.
				p := st.Progress.WithoutText()
				j.Progress = &p
			}
			w.Active = append(w.Active, j)
		}
		slices.SortFunc(w.Active, func(a, b ActiveJob) int { return a.Started.Compare(b.Started) })
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b WorkerServer) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Host, b.Host), cmp.Compare(a.PID, b.PID), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

func sameQueues(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for q, w := range a {
		if b[q] != w {
			return false
		}
	}
	return true
}

// FleetBucket is one capacity bucket of one model: the longest job its queues hold, the live
// workers that serve it, and its queues (one per priority).
type FleetBucket struct {
	Model    string `json:"model"`
	ModelKey string `json:"model_key"`
	// Bucket is the queue names' last part (ctx16384); MaxContext, the context (prompt +
	// max_tokens) every job in its queues fits in, and every worker serving it holds.
	Bucket     string       `json:"bucket"`
	MaxContext int          `json:"max_context"`
	Workers    []string     `json:"workers"`
	Queues     []QueueDepth `json:"queues"`
}

// QueueDepth counts one queue's jobs by state.
type QueueDepth struct {
	Queue     string `json:"queue"`
	Pending   int    `json:"pending"`
	Active    int    `json:"active"`
	Scheduled int    `json:"scheduled"`
	Retry     int    `json:"retry"`
	Archived  int    `json:"archived"`
	Completed int    `json:"completed"`
}

// Fleet is the fleet by model and capacity bucket: each live worker's top bucket (its
// MaxContext) and every bucket that has queues in Redis; and the queues no bucket owns (the
// plain priority queues, a model's unrouted queue, queues of other versions).
type Fleet struct {
	Buckets []FleetBucket `json:"buckets"`
	Other   []QueueDepth  `json:"other_queues"`
}

// FleetView reads the fleet from the Redis at redisURL: Client.Fleet on a client made for
// the call.
func FleetView(redisURL string, tlsFiles TLSFiles) (Fleet, error) {
	c, err := NewClient(redisURL, WithTLSFiles(tlsFiles))
	if err != nil {
		return Fleet{}, err
	}
	defer c.Close()
	return c.Fleet(context.Background())
}

// Fleet reads the fleet by model and capacity class.
func (c *Client) Fleet(ctx context.Context) (Fleet, error) {
	client, insp := c, c.insp
	caps, err := client.Capabilities(ctx)
	if err != nil {
		return Fleet{}, err
	}
	var live []Capability
	models := map[string]string{} // model key → name
	for _, c := range caps {
		if c.Routable() {
			live = append(live, c)
			models[c.ModelKey] = c.Model
		}
	}
	type bucketKey struct {
		model  string
		tokens int
	}
	byKey := map[bucketKey]*FleetBucket{}
	bucket := func(modelKey string, tokens int) *FleetBucket {
		k := bucketKey{modelKey, tokens}
		if fb := byKey[k]; fb != nil {
			return fb
		}
		fb := &FleetBucket{Model: models[modelKey], ModelKey: modelKey, Bucket: BucketName(tokens),
			MaxContext: tokens, Workers: []string{}, Queues: []QueueDepth{}}
		for _, c := range live {
			if c.ModelKey == modelKey && ServesBucket(c.MaxContext, tokens) {
				fb.Workers = append(fb.Workers, c.Worker)
			}
		}
		byKey[k] = fb
		return fb
	}
	for _, c := range live {
		if c.MaxContext > 0 {
			bucket(c.ModelKey, c.MaxContext)
		}
	}
	names, err := insp.Queues()
	if err != nil {
		return Fleet{}, fmt.Errorf("list queues: %w", err)
	}
	slices.Sort(names)
	var f Fleet
	for _, q := range names {
		info, err := insp.GetQueueInfo(q)
		if err != nil {
			continue // removed in between
		}
		d := QueueDepth{Queue: q, Pending: info.Pending, Active: info.Active, Scheduled: info.Scheduled, Retry: info.Retry, Archived: info.Archived, Completed: info.Completed}
		if rq, ok := ParseQueue(q); ok && rq.Bucket > 0 {
			fb := bucket(rq.ModelKey, rq.Bucket)
			fb.Queues = append(fb.Queues, d)
			continue
		}
		f.Other = append(f.Other, d)
	}
	for _, fb := range byKey {
		f.Buckets = append(f.Buckets, *fb)
	}
	slices.SortFunc(f.Buckets, func(a, b FleetBucket) int {
		return cmp.Or(cmp.Compare(a.ModelKey, b.ModelKey), cmp.Compare(a.MaxContext, b.MaxContext))
	})
	return f, nil
}

// Models are the models the workers ws serve, sorted.
func Models(ws []WorkerServer) []string {
	var models []string
	for _, w := range ws {
		if w.Model != "" && !slices.Contains(models, w.Model) {
			models = append(models, w.Model)
		}
	}
	slices.Sort(models)
	return models
}
