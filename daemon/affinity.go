package daemon

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redlite/batch/jobs"
)

// Prefix affinity (docs/prefix-cache.md, "Across the fleet"). A worker whose prefix cache is
// on (prefixCacheOn) and REDLITE_PREFIX_AFFINITY is not false records keys of the prompts of
// the jobs it completes (jobs.PrefixKeys, jobs.RecordedPrefixes) in a bounded LRU, publishes
// them in its capability document, and serves its own queues (jobs.AffinityQueue) above the
// others; a client sends a job whose prompt starts with a published key there (jobs.RouteJob,
// jobs.Client.Enqueue). The keys say what the worker read, not what its cache still holds:
// the engine evicts by its own bounds, and a job routed for a prefix it no longer holds runs
// as it would anywhere.
//
// Nothing waits there for good: a worker that shuts down hands the jobs of its own queues
// back to routing once it has stopped taking jobs (handOver), and the jobs left in the own
// queue of a worker that died are moved by the other workers' stranded sweep after
// REDLITE_CAPABILITY_TTL, as those of any queue no live worker serves (stranded.go). A worker
// that comes back under the same name serves the same queues again.

const outcomeHandedOver = "handed_over" // redlite_jobs_rerouted_total's reason for handOver's moves

// prefixLRU holds the keys a worker publishes, the most recently used first, at most max.
type prefixLRU struct {
	mu    sync.Mutex
	max   int
	order *list.List // of string
	at    map[string]*list.Element
	// changed receives a value (without blocking) when a key was added, so that the document
	// is published at once rather than at the next refresh.
	changed chan struct{}
}

func newPrefixLRU(max int) *prefixLRU {
	return &prefixLRU{max: max, order: list.New(), at: map[string]*list.Element{}, changed: make(chan struct{}, 1)}
}

// record makes a job's keys (longest first, as jobs.RecordedPrefixes lists them) the most
// recent, the longest first of all, and drops the least recent beyond the bound.
func (l *prefixLRU) record(keys []string) {
	added := false
	l.mu.Lock()
	for i := len(keys) - 1; i >= 0; i-- {
		if e, ok := l.at[keys[i]]; ok {
			l.order.MoveToFront(e)
			continue
		}
		l.at[keys[i]] = l.order.PushFront(keys[i])
		added = true
	}
	for l.order.Len() > l.max {
		e := l.order.Back()
		delete(l.at, e.Value.(string))
		l.order.Remove(e)
	}
	l.mu.Unlock()
	if added {
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
}

// keys lists the keys, the most recent first.
func (l *prefixLRU) keys() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, l.order.Len())
	for e := l.order.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(string))
	}
	return out
}

// recordPrefix records the prompt of a job this worker completed, when it publishes prefixes.
func (w *worker) recordPrefix(p jobs.Payload) {
	if w.affinity == nil {
		return
	}
	w.affinity.record(jobs.RecordedPrefixes(jobs.PrefixKeys(p, jobs.ModelKey(w.lm.name))))
}

// ownQueue reports whether queue is one of this worker's own.
func (w *worker) ownQueue(queue string) bool {
	rq, _ := jobs.ParseQueue(queue)
	return w.affinity != nil && rq.Affinity == jobs.AffinityName(w.name)
}

// handOver moves the jobs waiting in this worker's own queues, which no other worker serves,
// to where the live workers take them (routeAgain): it runs at shutdown, after the worker has
// stopped taking jobs and asynq has given back the ones it ran. A job that no other live
// worker can take stays, for this worker's return or the stranded sweep.
func (d *Daemon) handOver() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	caps, err := d.client.Capabilities(ctx)
	if err != nil {
		d.log.Warn("the jobs of this worker's own queues stay there for the stranded sweep: the fleet cannot be read", "err", err)
		return
	}
	for q := range d.cfg.Queues {
		if !d.w.ownQueue(q) {
			continue
		}
		rq, _ := jobs.ParseQueue(q)
		for {
			// Jobs given back by asynq at shutdown wait since then (restartWaits): before now.
			waiting, err := d.client.Waiting(ctx, q, time.Now())
			if err != nil {
				d.log.Warn("list the jobs of an own queue", "queue", q, "err", err)
				break
			}
			moved := 0
			for _, j := range waiting {
				p, err := jobs.Decode(j.Type, j.Payload)
				if err != nil {
					continue // the worker that takes it archives it as invalid
				}
				route, err := routeAgain(caps, rq, p)
				if err != nil || !route.Routed {
					continue // no other live worker takes it
				}
				if err := d.client.MoveWaiting(ctx, j, route.Queue); err != nil {
					if !errors.Is(err, jobs.ErrNotWaiting) {
						d.log.Warn("hand a job of an own queue over", "job", j.ID, "queue", q, "err", err)
					}
					continue
				}
				moved++
				d.m.rerouted.WithLabelValues(outcomeHandedOver).Inc()
				d.log.Info("job of this worker's own queue handed over", "job", j.ID, "from", q, "to", route.Queue)
			}
			if moved == 0 {
				break
			}
		}
	}
}
