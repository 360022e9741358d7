package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/internal/redisx"
	"github.com/redlite/batch/jobs"
)

// fleetWatch records, per worker, which jobs started decoding, and holds chosen jobs at their
// first prefill chunk until released: a worker whose one slot is held takes nothing else.
type fleetWatch struct {
	mu      sync.Mutex
	decoded map[string][]string // job id → workers that started decoding it, in order
	running map[string]string   // held job id → the worker holding it
	hold    map[string]chan struct{}
}

func newFleetWatch() *fleetWatch {
	return &fleetWatch{decoded: map[string][]string{}, running: map[string]string{}, hold: map[string]chan struct{}{}}
}

func (f *fleetWatch) observer(worker string) Observer {
	return Observer{
		PrefillChunk: func(ctx context.Context, id string, done, total int) {
			f.mu.Lock()
			ch, ok := f.hold[id]
			if ok {
				f.running[id] = worker
			}
			f.mu.Unlock()
			if ok {
				select {
				case <-ch:
				case <-ctx.Done():
				}
			}
		},
		Token: func(ctx context.Context, id string, generated int) {
			if generated == 1 {
				f.mu.Lock()
				f.decoded[id] = append(f.decoded[id], worker)
				f.mu.Unlock()
			}
		},
	}
}

// holdJob makes the job with this id (an idempotency key) wait at its first chunk.
func (f *fleetWatch) holdJob(id string) (release func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	f.hold[id] = ch
	f.mu.Unlock()
	return sync.OnceFunc(func() { close(ch) })
}

// waitHeld waits until the held job runs on a worker and returns which.
func (f *fleetWatch) waitHeld(t *testing.T, id string) string {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		f.mu.Lock()
		w := f.running[id]
		f.mu.Unlock()
		if w != "" {
			return w
		}
		select {
		case <-deadline:
			t.Fatalf("job %s never started", id)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (f *fleetWatch) decodedBy(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.decoded[id])
}

// fleetSetup is setup with a calibration that makes the tiny model's context expensive
// (256 KiB per position, a 200 MiB base), so that workers with limits a few hundred MiB
// apart take jobs of a few hundred and a few thousand tokens, which run in a second.
func fleetSetup(t *testing.T) *testBundle {
	t.Helper()
	b := setup(t)
	path := filepath.Join(t.TempDir(), "fleet-calibration.json")
	cal := `{"name": "fleet-test", "backend": "cpu", "status": "placeholder", "base_mib": 200, "min_chunk": 512,
	  "alignment_bytes": 4096, "attention_scratch_bytes_per_position_f32": 262144, "attention_scratch_bytes_per_position_f16": 262144}`
	if err := os.WriteFile(path, []byte(cal), 0o644); err != nil {
		t.Fatal(err)
	}
	b.cfg.Calibration = path
	return b
}

// fleetMember starts an in-process daemon named name with limitMiB and model (the bundle's
// when empty).
func fleetMember(t *testing.T, b *testBundle, name string, limitMiB int64, model string, obs Observer) *Daemon {
	t.Helper()
	cfg := b.cfg
	cfg.WorkerName, cfg.GPULimitMiB = name, limitMiB
	if model != "" {
		cfg.Model = model
	}
	return startDaemon(t, cfg, obs)
}

// capabilityOfWorker waits until the worker's capability is published and returns it.
func capabilityOfWorker(t *testing.T, c *jobs.Client, name string) jobs.Capability {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		caps, err := c.Capabilities(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, cp := range caps {
			if cp.Worker == name && !cp.Draining {
				return cp
			}
		}
		select {
		case <-deadline:
			t.Fatalf("worker %s published no capability within %v", name, waitLimit)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// rawEnqueue puts a job on a queue as a raw client does: no routing.
func rawEnqueue(t *testing.T, b *testBundle, queue, id string, p jobs.Payload) {
	t.Helper()
	data, err := jobs.EncodePayload(p)
	if err != nil {
		t.Fatal(err)
	}
	ru, _ := redisx.Parse(b.cfg.RedisURL)
	c := asynq.NewClient(ru.AsynqOpt())
	defer c.Close()
	if _, err := c.Enqueue(asynq.NewTask(p.TaskType(), data), asynq.Queue(queue), asynq.TaskID(id), asynq.MaxRetry(3), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// TestFleetRouting runs two workers of one model with different GPU limits: jobs go to a
// capacity bucket that every worker which holds them serves, small jobs run on both, a job too big for both is refused
// (and archived naming the largest worker when enqueued anyway), and a job a raw client puts
// on the plain queue that the small worker takes is moved to the big one and run once.
func TestFleetRouting(t *testing.T) {
	b := fleetSetup(t)
	watch := newFleetWatch()
	small := fleetMember(t, b, "small", 300, "", watch.observer("small"))
	fleetMember(t, b, "big", 600, "", watch.observer("big"))
	cs, cb := capabilityOfWorker(t, b.client, "small"), capabilityOfWorker(t, b.client, "big")
	if cb.MaxContext <= cs.MaxContext+64 {
		t.Fatalf("%d and %d tokens: the limits do not separate the workers", cs.MaxContext, cb.MaxContext)
	}
	t.Logf("small: %d tokens; big: %d tokens", cs.MaxContext, cb.MaxContext)
	// A small job goes to a queue both serve, the small worker with more weight than the big
	// one: the big one keeps its memory for the jobs only it holds.
	toBoth := func(queue string) bool { return cs.Queues[queue] > cb.Queues[queue] && cb.Queues[queue] > 0 }
	// onlyBig's context is beyond the small worker and within the big one.
	onlyBig := func(key string) *jobs.Generate {
		return &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(cs.MaxContext), Temperature: ptr(0.0), Common: jobs.Common{IdempotencyKey: key}}
	}
	smallJob := func(key string) *jobs.Generate {
		return &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(8), Common: jobs.Common{IdempotencyKey: key}}
	}

	t.Run("FitsOnlyBig", func(t *testing.T) {
		job := enqueue(t, b.client, onlyBig("only-big"))
		if !onlyServedBy(job.Queue, cb, cs) {
			t.Errorf("queue %s, want one of big's buckets beyond small", job.Queue)
		}
		res, err := waitResult(t, b.client, job.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := b.client.Status(context.Background(), job.ID)
		if res.Worker != "big" || st.Retried != 0 || !slices.Equal(watch.decodedBy(job.ID), []string{"big"}) {
			t.Errorf("ran on %q (decoded by %v), retried %d", res.Worker, watch.decodedBy(job.ID), st.Retried)
		}
	})

	t.Run("SmallJobsRunOnBoth", func(t *testing.T) {
		// Each worker has one slot; with both jobs held at their first chunk, each worker
		// must have taken one.
		r1, r2 := watch.holdJob("small-1"), watch.holdJob("small-2")
		defer r1()
		defer r2()
		j1, j2 := enqueue(t, b.client, smallJob("small-1")), enqueue(t, b.client, smallJob("small-2"))
		if !toBoth(j1.Queue) || j2.Queue != j1.Queue {
			t.Errorf("queues %s, %s, want one both workers serve, the small one first (small %v, big %v)", j1.Queue, j2.Queue, cs.Queues, cb.Queues)
		}
		got := []string{watch.waitHeld(t, "small-1"), watch.waitHeld(t, "small-2")}
		slices.Sort(got)
		if !slices.Equal(got, []string{"big", "small"}) {
			t.Errorf("small jobs ran on %v, want one on each worker", got)
		}
		r1()
		r2()
		for _, id := range []string{"small-1", "small-2"} {
			if _, err := waitResult(t, b.client, id, nil); err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("TooBigForAll", func(t *testing.T) {
		huge := &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(cb.MaxContext)}
		_, err := b.client.Enqueue(context.Background(), huge)
		if !errors.Is(err, jobs.ErrNoCapacity) || !strings.Contains(err.Error(), "on worker big") {
			t.Fatalf("enqueue: %v, want it refused naming worker big", err)
		}
		t.Logf("refused at submit: %v", err)
		job := enqueue(t, b.client, huge, jobs.EnqueueAnyway())
		st := waitFor(t, b.client, job.ID, "archive", func(st jobs.Status) bool { return st.State == jobs.StateArchived })
		for _, want := range []string{"does not fit on any live worker", "the fleet's largest is worker big (GPU limit 600 MiB)", "but the limit is 600 MiB"} {
			if !strings.Contains(st.LastError, want) {
				t.Errorf("last error %q lacks %q", st.LastError, want)
			}
		}
		if st.Retried != 0 {
			t.Errorf("retried %d times", st.Retried)
		}
	})

	t.Run("RawJobMovedToBig", func(t *testing.T) {
		// The big worker is held by one job, so the raw job on the plain queue can only be
		// taken by the small worker, which cannot fit it.
		release := watch.holdJob("holder")
		defer release()
		enqueue(t, b.client, onlyBig("holder"))
		if w := watch.waitHeld(t, "holder"); w != "big" {
			t.Fatalf("holder runs on %s", w)
		}
		before := counterValue(small.m.rerouted.WithLabelValues("does_not_fit"))
		rawEnqueue(t, b, jobs.QueueDefault, "raw-big", onlyBig(""))
		st := waitFor(t, b.client, "raw-big", "the move", func(st jobs.Status) bool { return onlyServedBy(st.Queue, cb, cs) })
		if st.State != jobs.StatePending || st.Retried != 0 || st.Retention != time.Hour || st.MaxRetry != 3 {
			t.Errorf("moved job: %+v", st)
		}
		release()
		res, err := waitResult(t, b.client, "raw-big", nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Worker != "big" || !slices.Equal(watch.decodedBy("raw-big"), []string{"big"}) {
			t.Errorf("ran on %q, decoded by %v; want once, by big", res.Worker, watch.decodedBy("raw-big"))
		}
		if got := counterValue(small.m.rerouted.WithLabelValues("does_not_fit")) - before; got != 1 {
			t.Errorf("small worker re-routed %v jobs, want 1", got)
		}
		if _, err := waitResult(t, b.client, "holder", nil); err != nil {
			t.Error(err)
		}
	})
}

// TestFleetShortEstimate routes a job whose prompt the client estimates at half its real
// length (Cyrillic text, which the English-trained vocabulary splits into bytes): the small
// worker it was routed to tokenizes it, finds it does not fit and moves it to the big one.
func TestFleetShortEstimate(t *testing.T) {
	b := fleetSetup(t)
	watch := newFleetWatch()
	small := fleetMember(t, b, "small", 300, "", watch.observer("small"))
	fleetMember(t, b, "big", 600, "", watch.observer("big"))
	cs, cb := capabilityOfWorker(t, b.client, "small"), capabilityOfWorker(t, b.client, "big")
	release := watch.holdJob("holder")
	defer release()
	enqueue(t, b.client, &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(cs.MaxContext), Common: jobs.Common{IdempotencyKey: "holder"}})
	if w := watch.waitHeld(t, "holder"); w != "big" {
		t.Fatalf("holder runs on %s", w)
	}
	prompt := strings.Repeat("ж", cs.MaxContext*2/3) // 2 bytes and about 2 tokens each
	est, _ := jobs.EstimatePrompt(&jobs.Generate{Prompt: prompt}, cs.Tokens)
	job := enqueue(t, b.client, &jobs.Generate{Prompt: prompt, MaxTokens: ptr(8), Common: jobs.Common{IdempotencyKey: "short-estimate"}})
	if q, _ := jobs.ParseQueue(job.Queue); !jobs.ServesBucket(cs.MaxContext, q.Bucket) {
		t.Fatalf("routed to %s with an estimate of %d tokens, want a bucket the small worker serves", job.Queue, est)
	}
	waitFor(t, b.client, job.ID, "the move", func(st jobs.Status) bool { return onlyServedBy(st.Queue, cb, cs) })
	release()
	res, err := waitResult(t, b.client, job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("estimated %d prompt tokens, %d real; small worker's limit %d tokens", est, res.Usage.PromptTokens, cs.MaxContext)
	if res.Worker != "big" || !slices.Equal(watch.decodedBy(job.ID), []string{"big"}) || counterValue(small.m.rerouted.WithLabelValues("does_not_fit")) != 1 {
		t.Errorf("ran on %s, decoded by %v, small re-routed %v", res.Worker, watch.decodedBy(job.ID), counterValue(small.m.rerouted.WithLabelValues("does_not_fit")))
	}
}

// TestFleetTwoModels runs two workers with different models: jobs for one never run on the
// other's worker, even when a raw client puts them where the other takes them, and a model
// nobody serves is refused with the served list.
func TestFleetTwoModels(t *testing.T) {
	b := setup(t)
	watch := newFleetWatch()
	modelB := fixtures.Path(t, "models", "tiny-qwen3next-IQ2_XXS.gguf")
	fleetMember(t, b, "worker-a", 4096, "", watch.observer("worker-a"))
	fleetMember(t, b, "worker-b", 4096, modelB, watch.observer("worker-b"))
	ca, cb := capabilityOfWorker(t, b.client, "worker-a"), capabilityOfWorker(t, b.client, "worker-b")
	if ca.Model == cb.Model {
		t.Fatalf("both workers serve %q", ca.Model)
	}
	gen := func(model, key string) *jobs.Generate {
		return &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(8), Common: jobs.Common{Model: model, IdempotencyKey: key}}
	}

	t.Run("EachModelOnItsWorker", func(t *testing.T) {
		for i, m := range []jobs.Capability{ca, cb, ca, cb} {
			job := enqueue(t, b.client, gen(m.Model, "m"+string(rune('0'+i))))
			res, err := waitResult(t, b.client, job.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Model != m.Model || res.Worker != m.Worker {
				t.Errorf("job for %s ran on %s (%s)", m.Model, res.Worker, res.Model)
			}
		}
	})

	t.Run("RawJobForBMovedOffA", func(t *testing.T) {
		release := watch.holdJob("hold-b")
		defer release()
		enqueue(t, b.client, gen(cb.Model, "hold-b"))
		watch.waitHeld(t, "hold-b")
		rawEnqueue(t, b, jobs.QueueDefault, "raw-b", gen(cb.Model, ""))
		waitFor(t, b.client, "raw-b", "the move", func(st jobs.Status) bool { return st.Queue != jobs.QueueDefault })
		release()
		res, err := waitResult(t, b.client, "raw-b", nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Worker != "worker-b" || !slices.Equal(watch.decodedBy("raw-b"), []string{"worker-b"}) {
			t.Errorf("ran on %s, decoded by %v", res.Worker, watch.decodedBy("raw-b"))
		}
	})

	t.Run("UnknownModelRefused", func(t *testing.T) {
		_, err := b.client.Enqueue(context.Background(), gen("no-such-model", ""))
		if !errors.Is(err, jobs.ErrUnknownModel) || !strings.Contains(err.Error(), ca.Model) || !strings.Contains(err.Error(), cb.Model) {
			t.Errorf("%v, want refused with both served models", err)
		}
		if _, err := b.client.Enqueue(context.Background(), gen("", "")); !errors.Is(err, jobs.ErrUnknownModel) {
			t.Errorf("no model with two served: %v", err)
		}
	})
}

// TestFleetWorkerStops stops the big worker of two, by SIGTERM and by kill -9: its capability
// goes (at once, and within REDLITE_CAPABILITY_TTL), jobs only it holds are refused meanwhile,
// and the job it was running when stopped runs when it returns.
func TestFleetWorkerStops(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet of real worker processes (-short skips it)")
	}
	b := fleetSetup(t)
	// Long enough for the big worker's restart, short enough to wait for its expiry.
	b.cfg.CapabilityTTL = 5 * time.Second
	fleetMember(t, b, "small", 300, "", Observer{})
	bigCfg := b.cfg
	bigCfg.WorkerName, bigCfg.GPULimitMiB = "big", 600
	bigCfg.ShutdownTimeout = 100 * time.Millisecond
	p := startDaemonProcess(t, bigCfg)
	cs, cb := capabilityOfWorker(t, b.client, "small"), capabilityOfWorker(t, b.client, "big")
	onlyBig := &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(cs.MaxContext), Temperature: ptr(0.0)}
	gone := func() bool {
		caps, err := b.client.Capabilities(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return !slices.ContainsFunc(caps, func(c jobs.Capability) bool { return c.Worker == "big" })
	}

	// SIGTERM while the big worker runs a job longer than its shutdown timeout: the job goes
	// back to its queue, which only the big worker serves, and runs when the worker returns
	// (within the TTL, before the small worker would archive it as stranded: stranded.go).
	longer := &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(cb.MaxContext - 32), Temperature: ptr(0.0)}
	requeued := enqueue(t, b.client, longer)
	waitFor(t, b.client, requeued.ID, "decoding", decoding)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if !gone() {
		t.Error("the big worker's capability outlived its SIGTERM shutdown")
	}
	if st, err := b.client.Status(context.Background(), requeued.ID); err != nil || st.State != jobs.StatePending || st.Queue != requeued.Queue {
		t.Errorf("the job running at SIGTERM: %+v %v, want it pending in %s", st, err, requeued.Queue)
	}
	if _, err := b.client.Enqueue(context.Background(), onlyBig); !errors.Is(err, jobs.ErrNoCapacity) {
		t.Errorf("with the big worker stopped: %v, want ErrNoCapacity", err)
	}

	p = startDaemonProcess(t, bigCfg)
	capabilityOfWorker(t, b.client, "big")
	if res, err := waitResult(t, b.client, requeued.ID, nil); err != nil || res.Worker != "big" {
		t.Errorf("the job requeued at SIGTERM: %+v %v, want it run by big on its return", res.Worker, err)
	}
	job := enqueue(t, b.client, onlyBig)
	waitFor(t, b.client, job.ID, "decoding", decoding)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	killed := time.Now()
	deadline := time.After(waitLimit)
	for !gone() {
		select {
		case <-deadline:
			t.Fatalf("the killed worker's capability is still listed after %v (TTL %v)", waitLimit, b.cfg.CapabilityTTL)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Logf("kill -9 to capability gone: %v (REDLITE_CAPABILITY_TTL %v)", time.Since(killed).Round(10*time.Millisecond), b.cfg.CapabilityTTL)
	if _, err := b.client.Enqueue(context.Background(), onlyBig); !errors.Is(err, jobs.ErrNoCapacity) {
		t.Errorf("with the big worker dead: %v, want ErrNoCapacity", err)
	}

	startDaemonProcess(t, bigCfg) // the orphan finder hands the killed job back (orphans.go)
	res, err := waitResult(t, b.client, job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Worker != "big" || res.Usage.CompletionTokens != cs.MaxContext {
		t.Errorf("the killed job ran again on %q with %d tokens", res.Worker, res.Usage.CompletionTokens)
	}
}

// onlyServedBy reports whether queue is a bucket queue that the worker of in serves and the
// worker of out does not.
func onlyServedBy(queue string, in, out jobs.Capability) bool {
	q, ok := jobs.ParseQueue(queue)
	return ok && q.Bucket > 0 && jobs.ServesBucket(in.MaxContext, q.Bucket) && !jobs.ServesBucket(out.MaxContext, q.Bucket)
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// TestFleetIssue27 is issue 27's fleet: two workers of one model, GPU limits 590 and 606 MiB
// (one memory class), one thread each. A job needing about 16,047 tokens of context, which
// only the big worker holds, used to be refused at submit with a message naming the big
// worker; it runs there.
func TestFleetIssue27(t *testing.T) {
	if testing.Short() {
		t.Skip("a two-worker fleet of real processes (-short skips it)")
	}
	b := setup(t)
	b.cfg.Threads = 1
	watch := newFleetWatch()
	fleetMember(t, b, "small", 590, "", watch.observer("small"))
	fleetMember(t, b, "big", 606, "", watch.observer("big"))
	cs, cb := capabilityOfWorker(t, b.client, "small"), capabilityOfWorker(t, b.client, "big")
	t.Logf("small: %d tokens; big: %d tokens", cs.MaxContext, cb.MaxContext)
	// A prompt of 750 bytes is at least 47 tokens (16-byte tokens at most): with max_tokens
	// 16,000 the job needs at least 16,047.
	p := &jobs.Generate{Prompt: strings.Repeat("Once upon a time, ", 42)[:750], MaxTokens: ptr(16000), Temperature: ptr(0.0),
		Common: jobs.Common{IdempotencyKey: "issue-27"}}
	if _, least := jobs.EstimatePrompt(p, cb.Tokens); least+16000 != 16047 || cs.MaxContext >= 16047 || cb.MaxContext < 16047 {
		t.Fatalf("the fleet is not issue 27's: at least %d tokens, small holds %d, big %d", least+16000, cs.MaxContext, cb.MaxContext)
	}
	job, err := b.client.Enqueue(context.Background(), p)
	if err != nil {
		t.Fatalf("refused at submit: %v", err)
	}
	if !onlyServedBy(job.Queue, cb, cs) {
		t.Errorf("queue %s, want one only big serves", job.Queue)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // 16,000 tokens on one thread of a loaded VM
	defer cancel()
	res, err := b.client.Wait(ctx, job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Worker != "big" || !slices.Equal(watch.decodedBy(job.ID), []string{"big"}) || res.Usage.PromptTokens+16000 < 16047 {
		t.Errorf("ran on %q (decoded by %v) with %d prompt tokens", res.Worker, watch.decodedBy(job.ID), res.Usage.PromptTokens)
	}
	t.Logf("%d prompt tokens + %d generated on %s", res.Usage.PromptTokens, res.Usage.CompletionTokens, res.Worker)
}

// TestFleetMixes runs workers of one model and one memory class (GPU limits 590–606 MiB)
// that differ in what they hold: slots (a batching pool), KV precision, limit. For mixes of
// them it routes jobs of every length against their published capabilities and checks the
// decision against each worker's planner and the queues its asynq server serves: a job goes
// to a queue that some worker serves and every worker serving it holds, exactly when some
// worker holds it. Then jobs at each worker's edge run on the whole fleet: each completes,
// once, on a worker that holds it.
func TestFleetMixes(t *testing.T) {
	if testing.Short() {
		t.Skip("six workers routing mixes (-short skips it)")
	}
	b := fleetSetup(t)
	b.cfg.Threads = 1
	watch := newFleetWatch()
	type member struct {
		limit int64
		slots int
		kv    string
	}
	members := map[string]member{
		"590": {590, 1, "auto"}, "606": {606, 1, "auto"}, "600-f32": {600, 1, "f32"}, "600-f16": {600, 1, "f16"},
		"606-2slots": {606, 2, "auto"}, "598-4slots-f16": {598, 4, "f16"},
	}
	daemons := map[string]*Daemon{}
	caps := map[string]jobs.Capability{}
	for name, m := range members {
		cfg := b.cfg
		cfg.WorkerName, cfg.GPULimitMiB, cfg.Concurrency, cfg.KV = name, m.limit, m.slots, m.kv
		daemons[name] = startDaemon(t, cfg, watch.observer(name))
	}
	for name := range members {
		caps[name] = capabilityOfWorker(t, b.client, name)
		t.Logf("%s: %d tokens, %d queues", name, caps[name].MaxContext, len(caps[name].Queues))
	}
	holds := func(name string, prompt, maxTokens int) bool {
		_, err := daemons[name].w.planFor(prompt, maxTokens)
		return err == nil
	}

	for _, mix := range [][]string{
		{"590", "606"}, {"600-f32", "600-f16"}, {"606-2slots", "590"}, {"598-4slots-f16", "600-f32", "606"},
		{"590", "606", "600-f32", "600-f16", "606-2slots", "598-4slots-f16"},
	} {
		t.Run("Route/"+strings.Join(mix, "+"), func(t *testing.T) {
			var fleet []jobs.Capability
			needs := map[int]bool{}
			largest := 0
			for _, name := range mix {
				fleet = append(fleet, caps[name])
				needs[caps[name].MaxContext], needs[caps[name].MaxContext+1] = true, true
				largest = max(largest, caps[name].MaxContext)
			}
			for need := 2; need <= largest+64; need += 13 {
				needs[need] = true
			}
			for need := range needs {
				var holders []string
				for _, name := range mix {
					if holds(name, 1, need-1) {
						holders = append(holders, name)
					}
				}
				// A raw prompt of one byte is one token to the client's estimate.
				r, err := jobs.RouteJob(fleet, &jobs.Generate{Prompt: "x", MaxTokens: ptr(need - 1)}, false)
				if len(holders) == 0 {
					if !errors.Is(err, jobs.ErrNoCapacity) {
						t.Fatalf("need %d, held by none: %+v %v, want ErrNoCapacity", need, r, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("need %d, held by %v: refused: %v", need, holders, err)
				}
				var servers []string
				for _, name := range mix {
					if daemons[name].cfg.Queues[r.Queue] > 0 {
						servers = append(servers, name)
						if !holds(name, 1, need-1) {
							t.Fatalf("need %d: queue %s is served by %s, which does not hold it", need, r.Queue, name)
						}
					}
				}
				if len(servers) == 0 {
					t.Fatalf("need %d, held by %v: queue %s is served by none of them", need, holders, r.Queue)
				}
			}
		})
	}

	t.Run("RunAtEachEdge", func(t *testing.T) {
		const prompt = "Once upon a time"
		probe := enqueue(t, b.client, &jobs.Generate{Prompt: prompt, MaxTokens: ptr(1)})
		pr, err := waitResult(t, b.client, probe.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for name, c := range caps {
			id := "edge-" + name
			enqueue(t, b.client, &jobs.Generate{Prompt: prompt, MaxTokens: ptr(c.MaxContext - pr.Usage.PromptTokens), Temperature: ptr(0.0),
				Common: jobs.Common{IdempotencyKey: id}})
			ids = append(ids, id)
		}
		for _, id := range ids {
			res, err := waitResult(t, b.client, id, nil)
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			st, _ := b.client.Status(context.Background(), id)
			by := watch.decodedBy(id)
			if len(by) != 1 || by[0] != res.Worker || !holds(res.Worker, res.Usage.PromptTokens, res.Usage.CompletionTokens) {
				t.Errorf("%s: ran on %s (decoded by %v), %d + %d tokens", id, res.Worker, by, res.Usage.PromptTokens, res.Usage.CompletionTokens)
			}
			t.Logf("%s: %d + %d tokens on %s, queue %s", id, res.Usage.PromptTokens, res.Usage.CompletionTokens, res.Worker, st.Queue)
		}
	})
}

// TestFleetModelSwitch kills a worker and brings one of another model up in its place, as a
// model switch does: a job enqueued without a model while the old worker's capability is
// still live goes to a queue that no live worker serves. Within REDLITE_CAPABILITY_TTL + 10 s
// of its enqueue it is moved to the new worker and runs; one that names the old model is
// archived with the reason within the same bound.
func TestFleetModelSwitch(t *testing.T) {
	b := setup(t)
	b.cfg.CapabilityTTL = 2 * time.Second
	oldCfg := b.cfg
	oldCfg.WorkerName = "old"
	p := startDaemonProcess(t, oldCfg)
	old := capabilityOfWorker(t, b.client, "old")
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	// Its document lives on for up to the TTL: clients still route to it.
	gen := func(key, model string) *jobs.Generate {
		return &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(8), Common: jobs.Common{IdempotencyKey: key, Model: model}}
	}
	enqueued := time.Now()
	stranded, named := enqueue(t, b.client, gen("stranded", "")), enqueue(t, b.client, gen("named", old.Model))
	for _, j := range []jobs.Job{stranded, named} {
		if q, ok := jobs.ParseQueue(j.Queue); !ok || q.ModelKey != old.ModelKey || q.Bucket == 0 {
			t.Fatalf("job %s went to %s, want a bucket of the old worker's model", j.ID, j.Queue)
		}
	}
	watch := newFleetWatch()
	d := fleetMember(t, b, "new", 4096, fixtures.Path(t, "models", "tiny-qwen3next-IQ2_XXS.gguf"), watch.observer("new"))
	fresh := capabilityOfWorker(t, b.client, "new")

	limit := b.cfg.CapabilityTTL + 10*time.Second
	ctx, cancel := context.WithDeadline(context.Background(), enqueued.Add(limit))
	defer cancel()
	res, err := b.client.Wait(ctx, stranded.ID, nil)
	if err != nil {
		t.Fatalf("the stranded job, %v after its enqueue (TTL %v): %v", time.Since(enqueued).Round(time.Millisecond), b.cfg.CapabilityTTL, err)
	}
	ran := time.Since(enqueued)
	if res.Worker != "new" || res.Model != fresh.Model || !slices.Equal(watch.decodedBy(stranded.ID), []string{"new"}) {
		t.Errorf("ran on %s (%s), decoded by %v", res.Worker, res.Model, watch.decodedBy(stranded.ID))
	}
	// The named one is archived within the same bound.
	var st jobs.Status
	for st.State != jobs.StateArchived {
		if st, err = b.client.Status(ctx, named.ID); err != nil {
			t.Fatalf("the named job, %v after its enqueue (TTL %v): %v; last %+v", time.Since(enqueued).Round(time.Millisecond), b.cfg.CapabilityTTL, err, st)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the named job is not archived %v after its enqueue (TTL %v): %+v", limit, b.cfg.CapabilityTTL, st)
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, want := range []string{"in queue " + named.Queue + ", which no live worker serves", fmt.Sprintf("no live worker serves %q", old.Model)} {
		if !strings.Contains(st.LastError, want) {
			t.Errorf("last error %q lacks %q", st.LastError, want)
		}
	}
	if got := counterValue(d.m.rerouted.WithLabelValues(outcomeStranded)); got != 1 {
		t.Errorf("moved %v stranded jobs, want 1", got)
	}
	t.Logf("stranded job done %v after its enqueue (TTL %v); the named one archived: %s", ran.Round(time.Millisecond), b.cfg.CapabilityTTL, st.LastError)
}
