package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/internal/redistest"
	"github.com/redlite/batch/internal/redisx"
)

func capability(worker, model string, limitMiB int64, maxContext int) Capability {
	return Capability{Version: 1, ID: worker + ":1", Worker: worker, Model: model, ModelKey: ModelKey(model), GPULimitMiB: limitMiB,
		Class: ClassOf(limitMiB), MaxContext: maxContext, Slots: 1,
		Tokens: TokenStats{BytesPerToken: 4, MaxTokenBytes: 16, TemplateTokens: 10}}
}

func TestClasses(t *testing.T) {
	for _, tc := range []struct {
		mib  int64
		want string
	}{{100, "0m"}, {300, "256m"}, {600, "512m"}, {21741, "20g"}, {36864, "32g"}, {1 << 30, "512g"}} {
		if got := ClassOf(tc.mib); got != tc.want {
			t.Errorf("ClassOf(%d) = %s, want %s", tc.mib, got, tc.want)
		}
	}
	if got := strings.Join(ClassesBelow("2g"), ","); got != "1g,512m,256m" {
		t.Errorf("ClassesBelow(2g) = %s", got)
	}
	if got := ModelKey("Qwen3 Next 80B/A3B (IQ2_XXS)"); got != "qwen3-next-80b-a3b-iq2_xxs" {
		t.Errorf("ModelKey = %q", got)
	}
	if got := BaseQueue(ClassQueue("critical", "m", "20g")); got != "critical" {
		t.Errorf("BaseQueue = %q", got)
	}
	want := map[string]int{"default": 3, "default@m": 3, "default@m@1g": 12, "default@m@512m": 3, "low": 1, "low@m": 1, "low@m@1g": 4, "low@m@512m": 1}
	if got := WorkerQueues(map[string]int{"default": 3, "low": 1}, "m", "1g", []string{"512m"}); !maps.Equal(got, want) {
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
	t.Run("SmallestClassThatFits", func(t *testing.T) {
		r, err := RouteJob(fleet, gen("A", 400, 100), false) // ≈100 tokens + 100
		if err != nil || r.Queue != "default@a@512m" || !r.Routed {
			t.Errorf("%+v %v", r, err)
		}
		r, err = RouteJob(fleet, gen("a", 4000, 2000), false) // ≈1000 + 2000: only big
		if err != nil || r.Queue != "default@a@1g" {
			t.Errorf("%+v %v", r, err)
		}
	})
	t.Run("EstimateTooLongButMightFit", func(t *testing.T) {
		// ≈ 12,500 tokens estimated, at least 3,125: the biggest class tokenizes and decides.
		r, err := RouteJob(fleet, gen("A", 50000, 100), false)
		if err != nil || r.Queue != "default@a@1g" {
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
		if err != nil || r.Queue != "default@a@1g" || r.Routed {
			t.Errorf("anyway: %+v %v", r, err)
		}
	})
	t.Run("Summaries", func(t *testing.T) {
		sum := func(bytes int, st Strategy) *Summarize {
			mt := 100
			return &Summarize{Version: 1, Input: strings.Repeat("word ", bytes/5), MaxTokens: &mt, Strategy: st, Common: Common{Model: "A"}}
		}
		// Too long for every worker: single is refused, auto goes to the largest class,
		// whose worker summarizes it hierarchically; hierarchical always starts in the
		// smallest class, which every worker serves.
		if _, err := RouteJob(fleet, sum(200000, StrategySingle), false); !errors.Is(err, ErrNoCapacity) {
			t.Errorf("single: %v, want ErrNoCapacity", err)
		}
		if r, err := RouteJob(fleet, sum(200000, ""), false); err != nil || r.Queue != "default@a@1g" {
			t.Errorf("auto: %+v %v", r, err)
		}
		if r, err := RouteJob(fleet, sum(200000, StrategyHierarchical), false); err != nil || r.Queue != "default@a@512m" {
			t.Errorf("hierarchical: %+v %v", r, err)
		}
		// A child goes where it fits, as any job.
		child := sum(400, StrategySingle)
		child.Part = &Part{Parent: "p", Pieces: 1}
		if r, err := RouteJob(fleet, child, false); err != nil || r.Queue != "default@a@512m" {
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
}

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
	if err != nil || job.Queue != "default@a@1g" {
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
	if job, err := c.Enqueue(ctx, &Generate{Prompt: "hello", MaxTokens: &max}, EnqueueAnyway()); err != nil || job.Queue != "default@a@1g" {
		t.Errorf("anyway: %+v %v", job, err)
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

func redisZ(expiry time.Time, id string) redis.Z {
	return redis.Z{Score: float64(expiry.Unix()), Member: id}
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
// (routing reads the capabilities on every call) and against an empty fleet. The documents
// are as large as a worker's (profile, calibration, policy, queues).
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
	return WorkerQueues(QueueWeights(), cp.ModelKey, cp.Class, ClassesBelow(cp.Class))
}
