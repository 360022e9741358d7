package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// WorkerJobsKey is the set of the job ids the worker process on host with pid is running:
// written when a job starts, before the engine runs (asynq's own list of a worker's jobs is
// written only with its next heartbeat), so that a restarted worker can prove them orphaned.
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
	Class         string    `json:"class,omitempty"`
	GPULimitMiB   int64     `json:"gpu_limit_mib,omitempty"`
	MaxContext    int       `json:"max_context,omitempty"`
	Draining      bool      `json:"draining"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
}

// ActiveJob is a job a worker is running.
type ActiveJob struct {
	ID       string    `json:"id"`
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
				w.Name, w.Model, w.Backend, w.Class, w.GPULimitMiB, w.MaxContext, w.Draining, w.LastHeartbeat =
					c.Worker, c.Model, c.Backend, c.Class, c.GPULimitMiB, c.MaxContext, c.Draining, c.Updated
			}
		}
		for _, a := range s.ActiveWorkers {
			j := ActiveJob{ID: a.TaskID, Type: a.TaskType, Queue: a.Queue, Started: a.Started, Deadline: a.Deadline}
			if st, err := client.Status(ctx, a.TaskID); err == nil && st.State == StateActive {
				j.Progress = st.Progress
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

// FleetClass is one capacity class of one model: its live workers, the longest job each of
// them takes, and its queues.
type FleetClass struct {
	Model    string   `json:"model"`
	ModelKey string   `json:"model_key"`
	Class    string   `json:"class"`
	Workers  []string `json:"workers"`
	// MaxContext is the longest prompt + max_tokens every worker of the class takes;
	// Largest, the longest prompt per KV precision and max_tokens of its smallest worker.
	MaxContext int             `json:"max_context"`
	Largest    []LargestPrompt `json:"largest"`
	Queues     []QueueDepth    `json:"queues"`
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

// Fleet is the fleet by model and capacity class, and the queues no class owns (the plain
// priority queues and a model's unrouted queue).
type Fleet struct {
	Classes []FleetClass `json:"classes"`
	Other   []QueueDepth `json:"other_queues"`
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
	byKey := map[string]*FleetClass{}
	for _, c := range caps {
		k := c.ModelKey + "@" + c.Class
		fc := byKey[k]
		if fc == nil {
			fc = &FleetClass{Model: c.Model, ModelKey: c.ModelKey, Class: c.Class, MaxContext: c.MaxContext, Largest: c.Largest, Queues: []QueueDepth{}}
			byKey[k] = fc
		}
		fc.Workers = append(fc.Workers, c.Worker)
		if c.MaxContext < fc.MaxContext {
			fc.MaxContext, fc.Largest = c.MaxContext, c.Largest
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
		parts := strings.Split(q, "@")
		if len(parts) == 3 {
			k := parts[1] + "@" + parts[2]
			fc := byKey[k]
			if fc == nil {
				// Jobs wait for a class with no live worker.
				fc = &FleetClass{ModelKey: parts[1], Class: parts[2], Workers: []string{}, Queues: []QueueDepth{}}
				byKey[k] = fc
			}
			fc.Queues = append(fc.Queues, d)
			continue
		}
		f.Other = append(f.Other, d)
	}
	for _, fc := range byKey {
		f.Classes = append(f.Classes, *fc)
	}
	slices.SortFunc(f.Classes, func(a, b FleetClass) int {
		return cmp.Or(cmp.Compare(a.ModelKey, b.ModelKey), cmp.Compare(ClassMiB(a.Class), ClassMiB(b.Class)))
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
