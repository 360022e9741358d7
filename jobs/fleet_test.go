package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/internal/redistest"
	"github.com/redlite/batch/internal/redisx"
)

func capability(worker, model string, limitMiB int64, maxContext int) Capability {
	return Capability{Version: CapabilityVersion, ID: worker + ":1", Worker: worker, Model: model, ModelKey: ModelKey(model), GPULimitMiB: limitMiB,
		MaxContext: maxContext, Slots: 1, Tokens: TokenStats{BytesPerToken: 4, MaxTokenBytes: 16, TemplateTokens: 10}}
}

func TestBuckets(t *testing.T) {
	for _, tc := range []struct {
		maxContext int
		want       []int
	}{
		{0, nil}, {100, []int{100}}, {256, []int{256}}, {300, []int{256, 300}},
		{1024, []int{256, 384, 512, 768, 1024}}, {1100, []int{256, 384, 512, 768, 1024, 1100}},
		{24576, []int{256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576}},
	} {
		if got := CapacityBuckets(tc.maxContext); !slices.Equal(got, tc.want) {
			t.Errorf("CapacityBuckets(%d) = %v, want %v", tc.maxContext, got, tc.want)
		}
		for _, b := range tc.want {
			if !ServesBucket(tc.maxContext, b) {
				t.Errorf("ServesBucket(%d, %d) = false", tc.maxContext, b)
			}
		}
	}
	for _, tc := range []struct{ maxContext, need, want int }{
		{24576, 1, 256}, {24576, 16047, 16384}, {24576, 16384, 16384}, {24576, 16385, 24576}, {24576, 24576, 24576},
		{15000, 14000, 15000}, {15000, 12000, 12288}, {100, 50, 100}, {100, 101, 0}, {0, 1, 0},
	} {
		got, ok := BucketFor(tc.maxContext, tc.need)
		if got != tc.want || ok != (tc.want > 0) {
			t.Errorf("BucketFor(%d, %d) = %d %v, want %d", tc.maxContext, tc.need, got, ok, tc.want)
		}
	}
	if ServesBucket(24576, 20000) || ServesBucket(15000, 16384) || ServesBucket(15000, 14999) {
		t.Error("a worker serves a bucket that is neither a grid step below its context nor its context")
	}
	if b, ok := BucketFor(math.MaxInt, math.MaxInt-1); !ok || b != math.MaxInt {
		t.Errorf("BucketFor at the largest int: %d %v", b, ok)
	}
	if got := ModelKey("Qwen3 Next 80B/A3B (IQ2_XXS)"); got != "qwen3-next-80b-a3b-iq2_xxs" {
		t.Errorf("ModelKey = %q", got)
	}
	q := BucketQueue("critical", "m", 16384)
	if q != "critical@m@ctx16384" || BaseQueue(q) != "critical" {
		t.Errorf("BucketQueue = %q, BaseQueue = %q", q, BaseQueue(q))
	}
	for queue, want := range map[string]struct {
		q  RoutedQueue
		ok bool
	}{
		"default":            {},
		"default@m":          {RoutedQueue{Base: "default", ModelKey: "m"}, true},
		"default@m@ctx16384": {RoutedQueue{Base: "default", ModelKey: "m", Bucket: 16384, Routed: true}, true},
		"default@m@512m":     {RoutedQueue{Base: "default", ModelKey: "m", Routed: true}, true},
		"default@m@ctx-3":    {RoutedQueue{Base: "default", ModelKey: "m", Routed: true}, true},
		"default@@ctx1":      {},
		"a@b@c@d":            {},
	} {
		if q, ok := ParseQueue(queue); q != want.q || ok != want.ok {
			t.Errorf("ParseQueue(%q) = %+v %v, want %+v %v", queue, q, ok, want.q, want.ok)
		}
	}
	want := map[string]int{"default": 3, "default@m": 3, "default@m@ctx256": 3, "default@m@ctx384": 12, "default@m@ctx512": 12, "default@m@ctx600": 12,
		"low": 1, "low@m": 1, "low@m@ctx256": 1, "low@m@ctx384": 4, "low@m@ctx512": 4, "low@m@ctx600": 4}
	if got := WorkerQueues(map[string]int{"default": 3, "low": 1}, "m", 600); !maps.Equal(got, want) {
		t.Errorf("WorkerQueues = %v, want %v", got, want)
	}
}

func TestRouteJob(t *testing.T) {
	small, big := capability("small", "A", 600, 1000), capability("big", "A", 1200, 5000)
	other := capability("b", "B", 600, 1000)
	fleet := []Capability{small, big, other}
	gen := func(model string, promptBytes, maxTokens int) *Generate {
		return &Generate{Prompt: strings.Repeat("x", promptBytes), MaxTokens: &maxTokens, Common: Common{Model: model}}
	}
	t.Run("EveryHolderServesIt", func(t *testing.T) {
		// ≈100 tokens + 100: the top of the small worker's grid, which both serve (the small
		// one with its top weight).
		r, err := RouteJob(fleet, gen("A", 400, 100), false)
		if err != nil || r.Queue != "default@a@ctx768" || !r.Routed || r.Bucket != 768 {
			t.Errorf("%+v %v", r, err)
		}
		r, err = RouteJob(fleet, gen("A", 400, 800), false) // ≈900: the small worker's top bucket
		if err != nil || r.Queue != "default@a@ctx1000" {
			t.Errorf("%+v %v", r, err)
		}
		r, err = RouteJob(fleet, gen("a", 4000, 2000), false) // ≈1000 + 2000: only big
		if err != nil || r.Queue != "default@a@ctx5000" {
			t.Errorf("%+v %v", r, err)
		}
	})
	t.Run("OneQueueForEqualWorkers", func(t *testing.T) {
		// Workers that hold the same take every job from one queue per priority, in the
		// order the jobs came, whatever their length.
		equal := []Capability{capability("m1", "A", 600, 5000), capability("m2", "A", 600, 5000)}
		for _, mt := range []int{1, 100, 1000, 4000, 4990} {
			if r, err := RouteJob(equal, gen("A", 4, mt), false); err != nil || r.Queue != "default@a@ctx5000" {
				t.Errorf("max_tokens %d: %+v %v, want default@a@ctx5000", mt, r, err)
			}
		}
	})
	t.Run("EstimateTooLongButMightFit", func(t *testing.T) {
		// ≈ 12,500 tokens estimated, at least 3,125: the largest worker tokenizes and decides.
		r, err := RouteJob(fleet, gen("A", 50000, 100), false)
		if err != nil || r.Queue != "default@a@ctx5000" {
			t.Errorf("%+v %v", r, err)
		}
	})
	t.Run("TooBigIsRefused", func(t *testing.T) {
		_, err := RouteJob(fleet, gen("A", 10, 8000), false)
		var re *RouteError
		if !errors.Is(err, ErrNoCapacity) || !errors.As(err, &re) || re.Largest.Worker != "big" {
			t.Fatalf("%v, want ErrNoCapacity naming big", err)
		}
		for _, want := range []string{"largest job the fleet takes is 5000 tokens on worker big", "GPU limit 1200 MiB"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q lacks %q", err, want)
			}
		}
		r, err := RouteJob(fleet, gen("A", 10, 8000), true)
		if err != nil || r.Queue != "default@a@ctx5000" || r.Routed {
			t.Errorf("anyway: %+v %v", r, err)
		}
	})
	t.Run("Summaries", func(t *testing.T) {
		sum := func(bytes int, st Strategy) *Summarize {
			mt := 100
			return &Summarize{Version: 1, Input: strings.Repeat("word ", bytes/5), MaxTokens: &mt, Strategy: st, Common: Common{Model: "A"}}
		}
		// Too long for every worker: single is refused, auto goes to the largest worker,
		// which summarizes it hierarchically; hierarchical always starts in a bucket every
		// worker serves.
		if _, err := RouteJob(fleet, sum(200000, StrategySingle), false); !errors.Is(err, ErrNoCapacity) {
			t.Errorf("single: %v, want ErrNoCapacity", err)
		}
		if r, err := RouteJob(fleet, sum(200000, ""), false); err != nil || r.Queue != "default@a@ctx5000" {
			t.Errorf("auto: %+v %v", r, err)
		}
		if r, err := RouteJob(fleet, sum(200000, StrategyHierarchical), false); err != nil || r.Queue != "default@a@ctx768" {
			t.Errorf("hierarchical: %+v %v", r, err)
		}
		// A child goes where it fits, as any job.
		child := sum(400, StrategySingle)
		child.Part = &Part{Parent: "p", Pieces: 1}
		if r, err := RouteJob(fleet, child, false); err != nil || r.Queue != "default@a@ctx768" {
			t.Errorf("child: %+v %v", r, err)
		}
	})
	t.Run("UnknownModel", func(t *testing.T) {
		_, err := RouteJob(fleet, gen("C", 10, 10), false)
		if !errors.Is(err, ErrUnknownModel) || !strings.Contains(err.Error(), "served: A, B") {
			t.Errorf("%v", err)
		}
		_, err = RouteJob(fleet, gen("", 10, 10), false)
		if !errors.Is(err, ErrUnknownModel) {
			t.Errorf("no model with two served: %v", err)
		}
		r, err := RouteJob(fleet, gen("C", 10, 10), true)
		if err != nil || r.Queue != "default@c" {
			t.Errorf("anyway: %+v %v", r, err)
		}
	})
	t.Run("EmptyFleet", func(t *testing.T) {
		r, err := RouteJob(nil, gen("", 10, 10), false)
		if err != nil || r.Queue != QueueDefault || r.Routed {
			t.Errorf("%+v %v", r, err)
		}
	})
	t.Run("DrainingIsNotRouted", func(t *testing.T) {
		d := big
		d.Draining = true
		_, err := RouteJob([]Capability{small, d}, gen("A", 10, 2000), false)
		if !errors.Is(err, ErrNoCapacity) {
			t.Errorf("%v", err)
		}
	})
	t.Run("OlderWorkersAreNotRouted", func(t *testing.T) {
		// A worker of the version before buckets serves other queues: with only such
		// workers, jobs go to the plain queue, which every worker serves.
		old := big
		old.Version = 1
		r, err := RouteJob([]Capability{old}, gen("A", 10, 2000), false)
		if err != nil || r.Queue != QueueDefault {
			t.Errorf("%+v %v", r, err)
		}
	})
}

// TestRouteMixes routes jobs of every length against fleets of one model whose workers
// differ in what they hold but not by much (slots, KV precision, limits a few MiB apart: one
// memory class): a job goes to a queue that the smallest worker which holds it serves, and
// every worker that serves it holds the job, exactly when some worker holds it; it is refused with the
// largest worker's numbers otherwise. The daemon's TestFleetMixes runs the same with
// capabilities from the planner.
func TestRouteMixes(t *testing.T) {
	fleets := map[string][]int{
		"issue 27 (590 and 606 MiB)": {15360, 24576},
		"equal":                      {8192, 8192},
		"one grid step apart":        {8192, 12288},
		"a few tokens apart":         {16000, 16010, 16020},
		"slots and precisions":       {4096, 6000, 12000, 23000, 24576},
		"tiny":                       {100, 300},
	}
	for name, contexts := range fleets {
		t.Run(name, func(t *testing.T) {
			var caps []Capability
			for i, m := range contexts {
				caps = append(caps, capability(fmt.Sprintf("w%d", i), "A", 600, m))
			}
			largest := slices.Max(contexts)
			for need := 2; need <= largest+50; need += 7 {
				checkRoute(t, caps, need)
			}
			for _, m := range contexts { // the edges
				checkRoute(t, caps, m)
				checkRoute(t, caps, m+1)
			}
		})
	}
}

// checkRoute routes a job needing need tokens of context (a raw prompt of one byte, one
// token, and max_tokens) against caps and checks where it goes.
func checkRoute(t *testing.T, caps []Capability, need int) {
	t.Helper()
	p := &Generate{Prompt: "x", MaxTokens: ptrTo(need - 1)}
	holders, smallest := 0, 0 // smallest: the MaxContext of the smallest holder
	for _, c := range caps {
		if need <= c.MaxContext {
			holders++
			if smallest == 0 || c.MaxContext < smallest {
				smallest = c.MaxContext
			}
		}
	}
	r, err := RouteJob(caps, p, false)
	if holders == 0 {
		var re *RouteError
		if !errors.As(err, &re) || !errors.Is(err, ErrNoCapacity) || re.Largest.MaxContext != LargestWorker(caps).MaxContext || re.NeedContext != need {
			t.Fatalf("need %d, held by none: %+v %v, want refused naming the largest worker", need, r, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("need %d, held by %d workers: refused: %v", need, holders, err)
	}
	servers := 0
	for _, c := range caps {
		if WorkerQueues(QueueWeights(), c.ModelKey, c.MaxContext)[r.Queue] > 0 {
			servers++
			if need > c.MaxContext {
				t.Fatalf("need %d: queue %s is served by %s, which holds %d", need, r.Queue, c.Worker, c.MaxContext)
			}
		}
	}
	if servers == 0 || !ServesBucket(smallest, r.Bucket) {
		t.Fatalf("need %d: queue %s is served by %d workers, not by the smallest holder (%d tokens)", need, r.Queue, servers, smallest)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestCapabilitiesAndRouting publishes capabilities as a worker does and checks that Enqueue
// routes by them, refuses what nobody holds, and that ids are found in routed queues.
func TestCapabilitiesAndRouting(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	for _, cp := range []Capability{capability("small", "A", 600, 1000), capability("big", "A", 1200, 5000)} {
		b, _ := json.Marshal(cp)
		c.rdb.Set(ctx, CapabilityKey(cp.ID), b, time.Minute)
		c.rdb.ZAdd(ctx, CapabilitiesIndex, redisZ(time.Now().Add(time.Minute), cp.ID))
	}
	// A dead worker's index entry, long expired: pruned.
	c.rdb.ZAdd(ctx, CapabilitiesIndex, redisZ(time.Now().Add(-time.Hour), "dead:1"))
	caps, err := c.Capabilities(ctx)
	if err != nil || len(caps) != 2 || caps[0].Worker != "big" {
		t.Fatalf("%+v %v", caps, err)
	}
	if n, _ := c.rdb.ZCard(ctx, CapabilitiesIndex).Result(); n != 2 {
		t.Errorf("index has %d entries after pruning, want 2", n)
	}
	max := 2000
	job, err := c.Enqueue(ctx, &Generate{Prompt: "hello", MaxTokens: &max, Common: Common{IdempotencyKey: "k1"}})
	if err != nil || job.Queue != "default@a@ctx5000" {
		t.Fatalf("%+v %v", job, err)
	}
	if st, err := c.Status(ctx, "k1"); err != nil || st.Queue != job.Queue || st.State != StatePending {
		t.Errorf("status %+v %v", st, err)
	}
	if _, err := c.Enqueue(ctx, &Generate{Prompt: "hello", Common: Common{IdempotencyKey: "k1", Priority: PriorityHigh}}); !errors.Is(err, ErrDuplicate) {
		t.Errorf("duplicate key in another queue: %v", err)
	}
	max = 9000
	if _, err := c.Enqueue(ctx, &Generate{Prompt: "hello", MaxTokens: &max}); !errors.Is(err, ErrNoCapacity) {
		t.Errorf("too big: %v", err)
	}
	if job, err := c.Enqueue(ctx, &Generate{Prompt: "hello", MaxTokens: &max}, EnqueueAnyway()); err != nil || job.Queue != "default@a@ctx5000" {
		t.Errorf("anyway: %+v %v", job, err)
	}
}

// TestCapabilitiesReadOnChange checks when a client reads a document again: when its score
// changes (every write), and when its key should have expired; not otherwise.
func TestCapabilitiesReadOnChange(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	cp := capability("w", "A", 600, 1000)
	publish := func(doc []byte, expiry time.Time) {
		t.Helper()
		if err := c.rdb.Set(ctx, CapabilityKey(cp.ID), doc, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.rdb.ZAdd(ctx, CapabilitiesIndex, redisZ(expiry, cp.ID)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	list := func() []Capability {
		t.Helper()
		caps, err := c.Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return caps
	}
	expiry := time.Now().Add(time.Minute)
	doc, _ := json.Marshal(cp)
	publish(doc, expiry)
	if caps := list(); len(caps) != 1 || caps[0].Draining {
		t.Fatalf("first read: %+v", caps)
	}
	cp.Draining = true
	doc, _ = json.Marshal(cp)
	publish(doc, expiry.Add(time.Microsecond))
	if caps := list(); len(caps) != 1 || !caps[0].Draining {
		t.Fatalf("after a write with a new score: %+v, want draining", caps)
	}
	// Same score: the client does not read the document again (this one would not decode).
	publish([]byte("{broken"), expiry.Add(time.Microsecond))
	if caps := list(); len(caps) != 1 || !caps[0].Draining {
		t.Fatalf("same score: %+v, want the cached document", caps)
	}
	// Its score says the key has expired: read again, found gone, pruned.
	c.rdb.Del(ctx, CapabilityKey(cp.ID))
	c.rdb.ZAdd(ctx, CapabilitiesIndex, redisZ(time.Now().Add(-2*time.Second), cp.ID))
	if caps := list(); len(caps) != 0 {
		t.Fatalf("after its expiry: %+v, want none", caps)
	}
	if n, _ := c.rdb.ZCard(ctx, CapabilitiesIndex).Result(); n != 0 {
		t.Errorf("index has %d entries, want the expired one pruned", n)
	}
}

// TestMoveActive moves a job its worker holds to another queue, as a worker that cannot fit
// it does, and checks that it keeps its id, payload, retention and retry count, exists in one
// queue only, and that asynq reads the rewritten message.
func TestMoveActive(t *testing.T) {
	c, b := setup(t)
	ctx := context.Background()
	job, err := c.Enqueue(ctx, &Generate{Prompt: "move me"}, Retention(time.Hour), MaxRetry(5))
	if err != nil {
		t.Fatal(err)
	}
	moved := make(chan error, 1)
	startWorker(t, b, func(ctx context.Context, task *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		q, _ := asynq.GetQueueName(ctx)
		moved <- c.MoveActive(ctx, q, id, "default@elsewhere@1g")
		return asynq.RevokeTask
	})
	select {
	case err := <-moved:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("the worker never took the job")
	}
	st, err := c.Status(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Queue != "default@elsewhere@1g" || st.State != StatePending || st.Retention != time.Hour || st.MaxRetry != 5 || st.Retried != 0 {
		t.Errorf("after the move: %+v", st)
	}
	info, err := c.insp.GetTaskInfo(st.Queue, job.ID)
	if err != nil || !bytes.Contains(info.Payload, []byte("move me")) || info.Queue != st.Queue {
		t.Errorf("moved task %+v %v", info, err)
	}
	if _, err := c.insp.GetTaskInfo(QueueDefault, job.ID); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Errorf("the old queue still has it: %v", err)
	}
	// asynq removes the revoked attempt (the stub the move left) from the old queue.
	deadline := time.Now().Add(waitLimit)
	for c.rdb.Exists(ctx, redisx.TaskKey(QueueDefault, job.ID)).Val() == 1 || c.rdb.ZCard(ctx, "asynq:{default}:lease").Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("asynq never removed the moved job's stub from the old queue")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n, _ := c.rdb.LLen(ctx, "asynq:{default}:active").Result(); n != 0 {
		t.Errorf("the old queue's active list has %d entries", n)
	}
	if n, _ := c.rdb.LLen(ctx, "asynq:{default@elsewhere@1g}:pending").Result(); n != 1 {
		t.Errorf("pending in the new queue: %d", n)
	}
	if err := c.MoveActive(ctx, QueueDefault, job.ID, "x"); !errors.Is(err, ErrNotActive) {
		t.Errorf("moving a job that is not there: %v", err)
	}
}

// FuzzParseQueue takes apart queue names as Redis lists them (any client may name one):
// no panic, and a bucket queue's name is the one BucketQueue gives.
func FuzzParseQueue(f *testing.F) {
	for _, q := range []string{"default", "default@m", "default@m@ctx16384", "low@m@512m", "@@", "a@b@ctx0", "a@b@ctx+7", "a@b@ctx007", "a@b@ctx99999999999999999999"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, queue string) {
		q, ok := ParseQueue(queue)
		if ok && q.Bucket > 0 && BucketQueue(q.Base, q.ModelKey, q.Bucket) != queue {
			t.Fatalf("%q parses as %+v, which names %q", queue, q, BucketQueue(q.Base, q.ModelKey, q.Bucket))
		}
	})
}

func redisZ(expiry time.Time, id string) redis.Z {
	return redis.Z{Score: CapabilityScore(expiry), Member: id}
}

// FuzzRouteCapabilities routes jobs against capability documents as read from Redis (any
// bytes a broken or hostile writer left there): no panic, and a refusal is a *RouteError.
func FuzzRouteCapabilities(f *testing.F) {
	good, _ := json.Marshal(capability("big", "A", 1200, 5000))
	f.Add(good, "A", 100, 50)
	f.Add([]byte(`{"model":"A","model_key":"a","class":"","max_context":-1,"tokens":{"bytes_per_token":0,"max_token_bytes":-3}}`), "a", 0, 1)
	f.Add([]byte(`{"model":"","tokens":{"bytes_per_token":1e-300}}`), "", 5, 32768)
	f.Fuzz(func(t *testing.T, doc []byte, model string, promptBytes, maxTokens int) {
		var c Capability
		if json.Unmarshal(doc, &c) != nil {
			return
		}
		promptBytes = min(max(promptBytes, 1), MaxInputBytes)
		maxTokens = min(max(maxTokens, 1), MaxMaxTokens)
		p := &Generate{Prompt: strings.Repeat("x", promptBytes), MaxTokens: &maxTokens, Common: Common{Model: model}}
		r, err := RouteJob([]Capability{c, c}, p, false)
		var re *RouteError
		switch {
		case err == nil && r.Queue == "":
			t.Fatal("routed to no queue")
		case err != nil && !errors.As(err, &re):
			t.Fatalf("refusal %v is not a *RouteError", err)
		case err != nil:
			_ = err.Error()
		}
	})
}

// BenchmarkEnqueueRouted measures Enqueue against fleets of 8 and 64 published workers
// (routing lists the capabilities on every call) and against an empty fleet. The documents
// are as large as a worker's (profile, calibration, policy, queues) and do not change while
// it runs: the steady state between refreshes, which come every TTL/6 per worker.
func BenchmarkEnqueueRouted(b *testing.B) {
	for _, workers := range []int{0, 8, 64} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			srv := redistest.Start(b)
			c, err := NewClient(srv.URL(0))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			for i := range workers {
				cp := benchCapability(i)
				data, _ := json.Marshal(cp)
				c.rdb.Set(ctx, CapabilityKey(cp.ID), data, time.Hour)
				c.rdb.ZAdd(ctx, CapabilitiesIndex, redisZ(time.Now().Add(time.Hour), cp.ID))
			}
			p := &Generate{Prompt: strings.Repeat("word ", 200)}
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Enqueue(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchCapability is worker i of a fleet of two sizes, with a document as a daemon writes it.
func benchCapability(i int) Capability {
	cp := capability(fmt.Sprintf("w%d", i), "A", int64(600*(1+i%2)), 20000*(1+i%2))
	cp.Calibration = json.RawMessage(`{"name":"cpu-placeholder","backend":"cpu","model":"any","status":"placeholder","source":"not measured: Red Lite's Metal constants stand in until the CPU engine reports its allocations","base_mib":580,"scratch_mib_per_chunk_token":0.3723958333333333,"min_chunk":512,"alignment_bytes":4096,"mtp_max_context":8192}`)
	cp.Profile = json.RawMessage(`{"architecture":"qwen3","name":"tiny-qwen3","source":"/root/.cache/redlite/fixtures/a90e0db493bbb7fa/tiny-qwen3-Q8_0.gguf","context_length":40960,"expert_count":0,"expert_used_count":0,"expert_layer_count":0,"expert_bytes":0,"expert_cache_bytes":0,"dense_bytes":1816576,"kv_bytes_per_position":{"f32":2048,"f16":1024},"recurrent_state_bytes":0,"mtp_bytes":0}`)
	cp.Policy = json.RawMessage(`{"max_chunk":512,"expert_cache":"auto","preference":["kv","mtp","chunk"]}`)
	cp.ModelFile, cp.ModelFingerprint, cp.Architecture, cp.Backend, cp.Device = "a.gguf", `1830176 bytes, general.name "A"`, "qwen3", "cpu", "linux/amd64, 2 CPUs"
	for _, kv := range []string{"f32", "f16"} {
		for _, mt := range []int{1024, 4096} {
			cp.Largest = append(cp.Largest, LargestPrompt{KV: kv, MaxTokens: mt, PromptTokens: cp.MaxContext - mt})
		}
	}
	cp.Queues = benchQueues(cp)
	return cp
}

func benchQueues(cp Capability) map[string]int {
	return WorkerQueues(QueueWeights(), cp.ModelKey, cp.MaxContext)
}
