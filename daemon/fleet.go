package daemon

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redlite/batch/jobs"
)

// WorkerServer is one worker process as asynq's heartbeat describes it (the heartbeat is
// refreshed every 5 s and expires 30 s after a worker stops sending it).
type WorkerServer struct {
	ID          string         `json:"id"`
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
func Workers(redisURL string) ([]WorkerServer, error) {
	u, err := jobs.ParseRedisURL(redisURL)
	if err != nil {
		return nil, err
	}
	insp := asynq.NewInspector(u.AsynqOpt())
	defer insp.Close()
	servers, err := insp.Servers()
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	out := make([]WorkerServer, 0, len(servers))
	for _, s := range servers {
		w := WorkerServer{ID: s.ID, Host: s.Host, PID: s.PID, Concurrency: s.Concurrency, Queues: s.Queues,
			Strict: s.StrictPriority, Started: s.Started, Status: s.Status, Active: []ActiveJob{}}
		for _, a := range s.ActiveWorkers {
			w.Active = append(w.Active, ActiveJob{ID: a.TaskID, Type: a.TaskType, Queue: a.Queue, Started: a.Started, Deadline: a.Deadline})
		}
		slices.SortFunc(w.Active, func(a, b ActiveJob) int { return a.Started.Compare(b.Started) })
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b WorkerServer) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.PID, b.PID), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}
