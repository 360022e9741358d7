package daemon

import (
	"context"
	"errors"
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
// (256 KiB per position, a 200 MiB base), so that workers with limits a class apart take
// jobs of a few hundred and a few thousand tokens, which run in a second.
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

// TestFleetRouting runs two workers of one model with different GPU limits: jobs go to the
// smallest class that holds them, small jobs run on both, a job too big for both is refused
// (and archived naming the largest worker when enqueued anyway), and a job a raw client puts
// on the plain queue that the small worker takes is moved to the big one and run once.
func TestFleetRouting(t *testing.T) {
	b := fleetSetup(t)
	watch := newFleetWatch()
	small := fleetMember(t, b, "small", 300, "", watch.observer("small"))
	fleetMember(t, b, "big", 600, "", watch.observer("big"))
	cs, cb := capabilityOfWorker(t, b.client, "small"), capabilityOfWorker(t, b.client, "big")
	if cs.Class == cb.Class || cb.MaxContext <= cs.MaxContext+64 {
		t.Fatalf("classes %s (%d tokens) and %s (%d tokens): the limits do not separate the workers", cs.Class, cs.MaxContext, cb.Class, cb.MaxContext)
	}
	t.Logf("small: class %s, %d tokens; big: class %s, %d tokens", cs.Class, cs.MaxContext, cb.Class, cb.MaxContext)
	smallQueue := jobs.ClassQueue(jobs.QueueDefault, cs.ModelKey, cs.Class)
	bigQueue := jobs.ClassQueue(jobs.QueueDefault, cb.ModelKey, cb.Class)
	// onlyBig's context is beyond the small worker and within the big one.
	onlyBig := func(key string) *jobs.Generate {
		return &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(cs.MaxContext), Temperature: ptr(0.0), Common: jobs.Common{IdempotencyKey: key}}
	}
	smallJob := func(key string) *jobs.Generate {
		return &jobs.Generate{Prompt: "Once upon a time", MaxTokens: ptr(8), Common: jobs.Common{IdempotencyKey: key}}
	}

	t.Run("FitsOnlyBig", func(t *testing.T) {
		job := enqueue(t, b.client, onlyBig("only-big"))
		if job.Queue != bigQueue {
			t.Errorf("queue %s, want %s", job.Queue, bigQueue)
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
		if j1.Queue != smallQueue || j2.Queue != smallQueue {
			t.Errorf("queues %s, %s, want %s", j1.Queue, j2.Queue, smallQueue)
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
		st := waitFor(t, b.client, "raw-big", "the move", func(st jobs.Status) bool { return st.Queue == bigQueue })
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
	if want := jobs.ClassQueue(jobs.QueueDefault, cs.ModelKey, cs.Class); job.Queue != want {
		t.Fatalf("routed to %s with an estimate of %d tokens, want %s", job.Queue, est, want)
	}
	waitFor(t, b.client, job.ID, "the move", func(st jobs.Status) bool {
		return st.Queue == jobs.ClassQueue(jobs.QueueDefault, cb.ModelKey, cb.Class)
	})
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
	b := fleetSetup(t)
	b.cfg.CapabilityTTL = 2 * time.Second
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
	// back to the big class's queue, and runs when the worker returns.
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

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
