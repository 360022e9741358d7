package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/jobs"
)

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
}

// ActiveJob is a job a worker is running.
type ActiveJob struct {
	ID       string    `json:"id"`
	Type     string    `json:"type"`
	Queue    string    `json:"queue"`
	Started  time.Time `json:"started"`
	Deadline time.Time `json:"deadline"`
}

// Workers lists the worker servers registered in the Redis at redisURL, by host and PID.
func Workers(redisURL string, tlsFiles jobs.TLSFiles) ([]WorkerServer, error) {
	u, err := jobs.ParseRedisURL(redisURL)
	if err != nil {
		return nil, err
	}
	if u, err = u.WithTLSFiles(tlsFiles); err != nil {
		return nil, err
	}
	insp := asynq.NewInspector(u.AsynqOpt())
	defer insp.Close()
	servers, err := insp.Servers()
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	rdb, ok := u.AsynqOpt().MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return nil, errors.New("list workers: unexpected redis client type")
	}
	defer rdb.Close()
	out := make([]WorkerServer, 0, len(servers))
	for _, s := range servers {
		w := WorkerServer{ID: s.ID, Host: s.Host, PID: s.PID, Concurrency: s.Concurrency, Queues: s.Queues,
			Strict: s.StrictPriority, Started: s.Started, Status: s.Status, Active: []ActiveJob{}}
		// The identity heartbeat.go publishes beside asynq's heartbeat.
		if b, err := rdb.Get(context.Background(), identityKey(s.Host, s.PID)).Bytes(); err == nil {
			var id identity
			if json.Unmarshal(b, &id) == nil {
				w.Name, w.Version, w.Model, w.Backend = id.Name, id.Build.Version, id.Model, id.Backend
			}
		} else if !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		for _, a := range s.ActiveWorkers {
			w.Active = append(w.Active, ActiveJob{ID: a.TaskID, Type: a.TaskType, Queue: a.Queue, Started: a.Started, Deadline: a.Deadline})
		}
		slices.SortFunc(w.Active, func(a, b ActiveJob) int { return a.Started.Compare(b.Started) })
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b WorkerServer) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Host, b.Host), cmp.Compare(a.PID, b.PID), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}
