package daemon

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlite/batch/jobs"
)

func TestPrefixLRU(t *testing.T) {
	l := newPrefixLRU(10)
	var job [][]string
	for i := range 8 {
		var keys []string
		for k := range 4 {
			keys = append(keys, strconv.Itoa(i)+"."+strconv.Itoa(3-k)) // longest first
		}
		job = append(job, keys)
		l.record(keys)
		if got := l.keys(); len(got) > 10 || !slices.Equal(got[:4], keys) {
			t.Fatalf("after job %d: %v, want at most 10, its keys first, longest first", i, got)
		}
	}
	select {
	case <-l.changed:
	default:
		t.Error("new keys were recorded without a signal")
	}
	l.record(job[6][1:2])
	if got := l.keys(); !slices.Equal(got[:2], []string{job[6][1], job[7][0]}) || len(got) != 10 {
		t.Errorf("a key used again: %v, want it first", got)
	}
	select {
	case <-l.changed:
		t.Error("a known key signalled a change")
	default:
	}
}

// waitPrefixes waits until worker name publishes prefix keys and returns its document.
func waitPrefixes(t *testing.T, c *jobs.Client, name string) jobs.Capability {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		if cp := capabilityOfWorker(t, c, name); len(cp.Prefixes) > 0 {
			return cp
		}
		select {
		case <-deadline:
			t.Fatalf("worker %s published no prefixes within %v", name, waitLimit)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestFleetAffinity runs two batching workers (their prefix cache on, as by default): after
// one of them answered a question about a long document, later questions about it go to that
// worker's own queue and start from its cached prefix; a question about another document goes
// to the bucket as before; a job left in the own queue of a worker that is gone is moved by
// the stranded sweep; and a worker that shuts down hands the jobs of its own queue over.
func TestFleetAffinity(t *testing.T) {
	b := setup(t)
	b.cfg.Concurrency = 2
	b.cfg.CapabilityTTL = 2 * time.Second // the stranded sweep moves after it
	watch := newFleetWatch()
	daemons := map[string]*Daemon{}
	for _, name := range []string{"a", "b"} {
		cfg := b.cfg
		cfg.WorkerName = name
		cfg.ShutdownTimeout = 100 * time.Millisecond // the hand-over gives held jobs back
		daemons[name] = startDaemon(t, cfg, watch.observer(name))
	}
	doc := strings.Repeat("The supplier delivers forty crates every Monday and invoices at the end of the month. ", 40)
	ask := func(doc, q, key string) *jobs.Generate {
		return &jobs.Generate{MaxTokens: ptr(4), Temperature: ptr(0.0), Common: jobs.Common{IdempotencyKey: key},
			Messages: []jobs.Message{{Role: jobs.RoleSystem, Content: doc}, {Role: jobs.RoleUser, Content: q}}}
	}
	first, err := waitResult(t, b.client, enqueue(t, b.client, ask(doc, "When are the crates delivered?", "first")).ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	holder := first.Worker
	other := map[string]string{"a": "b", "b": "a"}[holder]
	cp := waitPrefixes(t, b.client, holder)
	if len(cp.Prefixes) > jobs.MaxPublishedPrefixes {
		t.Errorf("%d prefixes published", len(cp.Prefixes))
	}
	own := jobs.AffinityQueue(jobs.QueueDefault, cp.ModelKey, holder)
	t.Logf("the first question ran on %s; it publishes %d keys and serves %s", holder, len(cp.Prefixes), own)

	t.Run("SameDocumentToHolder", func(t *testing.T) {
		for i, q := range []string{"How many crates a week?", "When is the invoice due?"} {
			job := enqueue(t, b.client, ask(doc, q, "same-"+strconv.Itoa(i)))
			if job.Queue != own {
				t.Errorf("question %d went to %s, want %s", i, job.Queue, own)
			}
			res, err := waitResult(t, b.client, job.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Worker != holder || res.Usage.CachedTokens == 0 {
				t.Errorf("question %d ran on %s with %d cached tokens, want %s and the document's blocks", i, res.Worker, res.Usage.CachedTokens, holder)
			}
		}
		if n := counterValue(daemons[holder].m.affinityJobs); n != 2 {
			t.Errorf("redlite_affinity_jobs_total %v on %s, want 2", n, holder)
		}
		if n := gatheredCounter(t, daemons[other].reg, "redlite_jobs_routed_by_affinity_total"); n != 2 {
			t.Errorf("redlite_jobs_routed_by_affinity_total %v, want 2", n)
		}
	})

	t.Run("OtherDocumentToBucket", func(t *testing.T) {
		job := enqueue(t, b.client, ask(strings.Repeat("A lighthouse keeper logs every ship that passes the cape at night. ", 50), "Who keeps the log?", "other-doc"))
		if q, ok := jobs.ParseQueue(job.Queue); !ok || q.Bucket == 0 {
			t.Errorf("another document went to %s, want a bucket", job.Queue)
		}
		if _, err := waitResult(t, b.client, job.ID, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("GoneWorkersQueueSwept", func(t *testing.T) {
		ghost := jobs.AffinityQueue(jobs.QueueDefault, cp.ModelKey, "ghost")
		// Another document: whoever runs it must not come to hold the first one's prefix.
		rawEnqueue(t, b, ghost, "ghost-job", ask(strings.Repeat("Ghosts haunt the old mill by the river every autumn. ", 60), "Who haunts it?", ""))
		res, err := waitResult(t, b.client, "ghost-job", nil)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := b.client.Status(context.Background(), "ghost-job")
		if q, _ := jobs.ParseQueue(st.Queue); q.Bucket == 0 || (res.Worker != "a" && res.Worker != "b") {
			t.Errorf("the job left in %s ran on %q from %s, want a bucket", ghost, res.Worker, st.Queue)
		}
		moved := counterValue(daemons["a"].m.rerouted.WithLabelValues(outcomeStranded)) + counterValue(daemons["b"].m.rerouted.WithLabelValues(outcomeStranded))
		if moved != 1 {
			t.Errorf("%v stranded jobs moved, want 1", moved)
		}
	})

	t.Run("HandedOverAtShutdown", func(t *testing.T) {
		// The holder's first job is held at its first chunk, which holds its scheduler: the
		// others wait in its own queue or in its handlers when it shuts down.
		release := watch.holdJob("held")
		defer release()
		ids := []string{"held", "queued-1", "queued-2"}
		for i, id := range ids {
			job := enqueue(t, b.client, ask(doc, "Question "+strconv.Itoa(i)+": what is delivered?", id))
			if job.Queue != own {
				t.Fatalf("%s went to %s, want %s", id, job.Queue, own)
			}
			if i == 0 {
				watch.waitHeld(t, id)
			}
		}
		daemons[holder].Shutdown()
		release()
		for _, id := range ids {
			res, err := waitResult(t, b.client, id, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Worker != other {
				t.Errorf("%s ran on %s, want %s", id, res.Worker, other)
			}
		}
		if n := counterValue(daemons[holder].m.rerouted.WithLabelValues(outcomeHandedOver)); n != float64(len(ids)) {
			t.Errorf("%v jobs handed over, want %d", n, len(ids))
		}
	})
}
