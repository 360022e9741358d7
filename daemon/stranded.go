package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redlite/batch/jobs"
)

// A job can be left in a routed queue that no live worker serves: it was routed by a
// capability document that outlived its worker (killed, or switched to another model within
// REDLITE_CAPABILITY_TTL), its workers stopped for good, or a client of another version
// routed it. asynq takes nothing from, and forwards no retry out of, a queue no server
// serves, so without help it waits for good. Every worker therefore looks, every
// REDLITE_CAPABILITY_TTL/6, for jobs that have waited longer than the TTL in a routed queue
// that no live worker's document lists (by then every document that could have routed a
// job there has expired), and routes each again among the live workers (jobs.RouteJob, as
// a client does at submit): to a queue that a live worker which holds it serves, or, when
// none does, archived with RouteJob's refusal as the reason. Workers race for a job
// harmlessly: each move and archive is one Redis step that checks the job is still where it
// was found.

const outcomeStranded = "stranded" // redlite_jobs_rerouted_total's reason for such a move

// strandedSweeper moves or archives jobs left in queues no live worker serves.
type strandedSweeper struct {
	client *jobs.Client
	insp   *asynq.Inspector
	name   string // this worker's: its own document must be listed for the list to be trusted
	ttl    time.Duration
	log    *slog.Logger
	m      *metrics
	stop   chan struct{}
	done   chan struct{}
}

func newStrandedSweeper(client *jobs.Client, insp *asynq.Inspector, name string, ttl time.Duration, log *slog.Logger, m *metrics) *strandedSweeper {
	return &strandedSweeper{client: client, insp: insp, name: name, ttl: ttl, log: log.With("component", "stranded"), m: m,
		stop: make(chan struct{}), done: make(chan struct{})}
}

// start sweeps every TTL/6 until terminate.
func (s *strandedSweeper) start() {
	go func() {
		defer close(s.done)
		tick := time.NewTicker(s.ttl / 6)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				s.sweep(context.Background())
			}
		}
	}()
}

func (s *strandedSweeper) terminate() {
	close(s.stop)
	<-s.done
}

// sweep handles the stranded jobs it finds and returns how many it moved and archived.
func (s *strandedSweeper) sweep(ctx context.Context) (moved, archived int) {
	ctx, cancel := context.WithTimeout(ctx, max(s.ttl/6, 5*time.Second))
	defer cancel()
	caps, err := s.client.Capabilities(ctx)
	if err != nil {
		s.log.Debug("read the fleet", "err", err)
		return 0, 0
	}
	served := map[string]bool{}
	self := false
	for _, c := range caps {
		if c.Draining {
			continue
		}
		self = self || c.Worker == s.name
		for q := range c.Queues {
			served[q] = true
		}
	}
	if !self {
		// This worker's own document is missing (Redis lost it, or its first refresh has not
		// landed): the list cannot be trusted to say that nobody serves a queue.
		return 0, 0
	}
	queues, err := s.insp.Queues()
	if err != nil {
		s.log.Debug("list queues", "err", err)
		return 0, 0
	}
	before := time.Now().Add(-s.ttl)
	for _, q := range queues {
		rq, ok := jobs.ParseQueue(q)
		if !ok || !rq.Routed || served[q] {
			// Plain priority queues are every worker's; a model's own queue holds jobs
			// enqueued anyway for its workers to come (jobs.EnqueueAnyway).
			continue
		}
		waiting, err := s.client.Waiting(ctx, q, before)
		if err != nil {
			s.log.Debug("list waiting jobs", "queue", q, "err", err)
			continue
		}
		for _, j := range waiting {
			switch err := s.place(ctx, caps, rq, j); {
			case errors.Is(err, errArchived):
				archived++
			case err == nil:
				moved++
			case errors.Is(err, jobs.ErrNotWaiting):
			default:
				s.log.Warn("stranded job left where it is", "job", j.ID, "queue", q, "err", err)
			}
		}
	}
	return moved, archived
}

var errArchived = errors.New("archived")

// routeAgain routes a job that waits in routed queue rq among the live workers caps, as a
// client does at submit (to a bucket, never to a worker's own queue): a job that names no
// model was routed to rq's model, whose workers come first if any is live.
func routeAgain(caps []jobs.Capability, rq jobs.RoutedQueue, p jobs.Payload) (jobs.Route, error) {
	fleet := caps
	if p.Options().Model == "" {
		var same []jobs.Capability
		for _, c := range caps {
			if c.Routable() && c.ModelKey == rq.ModelKey {
				same = append(same, c)
			}
		}
		if len(same) > 0 {
			fleet = same
		}
	}
	return jobs.RouteJob(fleet, p, false)
}

// place routes one stranded job among the live workers and moves it there, or archives it
// with the reason when none can take it (errArchived).
func (s *strandedSweeper) place(ctx context.Context, caps []jobs.Capability, rq jobs.RoutedQueue, j jobs.WaitingJob) error {
	wait := time.Since(j.Since).Round(time.Second)
	if j.Since.IsZero() {
		wait = s.ttl
	}
	prefix := fmt.Sprintf("stranded for %v in queue %s, which no live worker serves", wait, j.Queue)
	p, err := jobs.Decode(j.Type, j.Payload)
	if err == nil {
		var route jobs.Route
		if route, err = routeAgain(caps, rq, p); err == nil {
			if route.Queue == j.Queue {
				return fmt.Errorf("routed back to its own queue")
			}
			if err := s.client.MoveWaiting(ctx, j, route.Queue); err != nil {
				return err
			}
			s.m.rerouted.WithLabelValues(outcomeStranded).Inc()
			s.log.Info("stranded job moved to a queue live workers serve", "job", j.ID, "from", j.Queue, "to", route.Queue, "waited", wait)
			return nil
		}
	}
	reason := fmt.Sprintf("%s, and no live worker can take it: %v", prefix, err)
	if err := s.client.ArchiveWaiting(ctx, j, reason); err != nil {
		return err
	}
	s.log.Warn("stranded job archived", "job", j.ID, "queue", j.Queue, "reason", reason)
	return errArchived
}
