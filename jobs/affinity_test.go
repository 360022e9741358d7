package jobs

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlite/batch/internal/redistest"
)

// document is text of n bytes that differs from stride to stride.
func document(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString("Clause ")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(" binds the supplier to deliver forty crates every Monday. ")
	}
	return b.String()[:n]
}

func askAbout(doc, question string) *Generate {
	return &Generate{Messages: []Message{{Role: RoleSystem, Content: doc}, {Role: RoleUser, Content: question}}}
}

func TestPrefixKeys(t *testing.T) {
	doc := document(5000)

	t.Run("Stable", func(t *testing.T) {
		// A fixed value: clients in other languages compute the same keys, and a change of
		// the scheme must be deliberate (it orphans every published key).
		keys := PrefixKeys(&Generate{Prompt: doc[:PrefixStride*2]}, "tiny-qwen3")
		want := []string{"58a182f0acd04db3", "7c543c80e8fc42e7"} // computed apart, in Python's hashlib
		if len(keys) != 2 || !slices.Equal(keys, PrefixKeys(&Generate{Prompt: doc[:PrefixStride*2]}, "tiny-qwen3")) {
			t.Fatalf("keys %v, want 2, the same on every call", keys)
		}
		if !slices.Equal(keys, want) {
			t.Errorf("keys %v, want %v", keys, want)
		}
	})

	t.Run("SharedDocumentSharesKeys", func(t *testing.T) {
		a, b := PrefixKeys(askAbout(doc, "When?"), "m"), PrefixKeys(askAbout(doc, "How many crates a week, and who pays?"), "m")
		// The document and the chat's separators before it: 5,000 + 13 bytes, 4 strides.
		if len(a) != 4 || len(b) != 4 || !slices.Equal(a, b) {
			t.Errorf("questions about one document: %d and %d keys, equal %v; want 4 equal", len(a), len(b), slices.Equal(a, b))
		}
		long := PrefixKeys(askAbout(doc, strings.Repeat("And what else? ", 100)), "m")
		if len(long) <= len(a) || !slices.Equal(long[:len(a)], a) {
			t.Errorf("a longer question: %d keys, its first %d not the shorter job's", len(long), len(a))
		}
	})

	t.Run("TextThatExtendsSharesKeys", func(t *testing.T) {
		short, long := PrefixKeys(&Generate{Prompt: doc[:3000]}, "m"), PrefixKeys(&Generate{Prompt: doc}, "m")
		if len(short) != 2 || len(long) != 4 || !slices.Equal(long[:2], short) {
			t.Errorf("prompt and its extension: %v and %v", short, long)
		}
	})

	t.Run("DifferentTextModelOrForm", func(t *testing.T) {
		base := PrefixKeys(askAbout(doc, "q"), "m")
		other := document(5001)[1:]
		for name, keys := range map[string][]string{
			"another document": PrefixKeys(askAbout(other, "q"), "m"),
			"another model":    PrefixKeys(askAbout(doc, "q"), "n"),
			"a raw prompt":     PrefixKeys(&Generate{Prompt: doc}, "m"),
			"another role":     PrefixKeys(&Generate{Messages: []Message{{Role: RoleUser, Content: doc}}}, "m"),
		} {
			if len(keys) == 0 || keys[0] == base[0] {
				t.Errorf("%s shares the first key", name)
			}
		}
	})

	t.Run("Summaries", func(t *testing.T) {
		a := PrefixKeys(&Summarize{Input: doc}, "m")
		b := PrefixKeys(&Summarize{Input: doc, Instructions: &Instructions{Style: StyleBullets}}, "m")
		if len(a) < 4 || !slices.Equal(a[:4], b[:4]) {
			t.Errorf("two summaries of one document: %v and %v", a, b)
		}
	})

	t.Run("ShortHasNone", func(t *testing.T) {
		// 1,023 bytes with "raw\x00" before the prompt.
		if keys := PrefixKeys(&Generate{Prompt: doc[:PrefixStride-5]}, "m"); len(keys) != 0 {
			t.Errorf("%d keys for less than a stride", len(keys))
		}
	})
}

func TestRecordedPrefixes(t *testing.T) {
	keys := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, strconv.Itoa(i))
		}
		return out
	}
	for _, tc := range []struct {
		n    int
		want []int // indexes into the keys
	}{
		{0, nil}, {1, []int{0}}, {3, []int{2, 1, 0}}, {6, []int{5, 4, 3, 2}},
		{40, []int{39, 38, 37, 36, 32, 24, 8}},
	} {
		k := keys(tc.n)
		var want []string
		for _, i := range tc.want {
			want = append(want, k[i])
		}
		if got := RecordedPrefixes(k); !slices.Equal(got, want) {
			t.Errorf("%d keys: recorded %v, want %v", tc.n, got, want)
		}
	}
	if n := len(RecordedPrefixes(keys(1 << 20))); n != recordedPrefixes {
		t.Errorf("a document of a million strides records %d keys, want %d", n, recordedPrefixes)
	}
}

func TestAffinityQueue(t *testing.T) {
	q := AffinityQueue(QueueDefault, "tiny-qwen3", "Mini A@lab")
	if q != "default@tiny-qwen3@worker-mini-a-lab" {
		t.Errorf("queue %q", q)
	}
	rq, ok := ParseQueue(q)
	if want := (RoutedQueue{Base: "default", ModelKey: "tiny-qwen3", Affinity: "worker-mini-a-lab", Routed: true}); !ok || rq != want {
		t.Errorf("ParseQueue(%q) = %+v %v, want %+v", q, rq, ok, want)
	}
	if BaseQueue(q) != QueueDefault {
		t.Errorf("BaseQueue(%q) = %q", q, BaseQueue(q))
	}
	if rq, _ := ParseQueue("default@m@worker-"); rq.Affinity != "" || !rq.Routed {
		t.Errorf("an empty worker name: %+v", rq)
	}
	own := AffinityQueues(QueueWeights(), "m", "w")
	buckets := WorkerQueues(QueueWeights(), "m", 4096)
	for base, w := range QueueWeights() {
		top := 0
		for q, wt := range buckets {
			if BaseQueue(q) == base {
				top = max(top, wt)
			}
		}
		if own[AffinityQueue(base, "m", "w")] <= top || own[AffinityQueue(base, "m", "w")] != w*weightAffinity {
			t.Errorf("own queue of %s weighs %d, its buckets up to %d", base, own[AffinityQueue(base, "m", "w")], top)
		}
	}
}

// withPrefixes is capability c serving its own queues and publishing the recorded keys of p.
func withPrefixes(c Capability, p Payload) Capability {
	c.Queues = WorkerQueues(QueueWeights(), c.ModelKey, c.MaxContext)
	for q, w := range AffinityQueues(QueueWeights(), c.ModelKey, c.Worker) {
		c.Queues[q] = w
	}
	if p != nil {
		c.Prefixes = RecordedPrefixes(PrefixKeys(p, c.ModelKey))
	}
	return c
}

func TestRouteJobAffinity(t *testing.T) {
	doc := document(8000)
	a := withPrefixes(capability("a", "A", 600, 5000), askAbout(doc, "When?"))
	b := withPrefixes(capability("b", "A", 600, 5000), askAbout(doc[:3000], "When?"))
	small := withPrefixes(capability("small", "A", 300, 1000), askAbout(doc, "When?"))
	fleet := []Capability{small, a, b}
	job := askAbout(doc, "How many?")
	job.MaxTokens = ptrTo(100)

	r, err := RouteJob(fleet, job, false)
	if err != nil {
		t.Fatal(err)
	}
	// The small worker holds the document's keys but not the job (8,000 bytes ≈ 2,000 tokens).
	want := []Affinity{{Worker: "a", Queue: "default@a@worker-a", Strides: 7, Slots: 1}, {Worker: "b", Queue: "default@a@worker-b", Strides: 2, Slots: 1}}
	if !slices.Equal(r.Affinity, want) {
		t.Errorf("affinity %+v, want %+v", r.Affinity, want)
	}
	if r.Queue != "default@a@ctx5000" {
		t.Errorf("queue %s, want the bucket as without affinity", r.Queue)
	}
	other, _ := RouteJob(fleet, askAbout(document(8001)[1:], "How many?"), false)
	if len(other.Affinity) != 0 {
		t.Errorf("another document: %+v", other.Affinity)
	}
	noQueue := a
	noQueue.Queues = WorkerQueues(QueueWeights(), a.ModelKey, a.MaxContext)
	if r, _ := RouteJob([]Capability{noQueue}, job, false); len(r.Affinity) != 0 {
		t.Errorf("a worker that serves no own queue: %+v", r.Affinity)
	}
	high := *job
	high.Priority = PriorityHigh
	if r, _ := RouteJob(fleet, &high, false); len(r.Affinity) == 0 || BaseQueue(r.Affinity[0].Queue) != QueueFor(PriorityHigh) {
		t.Errorf("a job of high priority: %+v", r.Affinity)
	}
}

// TestEnqueueAffinity publishes two workers that hold a document and enqueues jobs about it:
// each goes to the own queue of the worker holding the longest prefix while that queue's
// backlog is under two jobs per slot, then to the other's, then to the bucket.
func TestEnqueueAffinity(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	doc := document(8000)
	a := withPrefixes(capability("a", "A", 600, 5000), askAbout(doc, "When?"))
	b := withPrefixes(capability("b", "A", 600, 5000), askAbout(doc[:3000], "When?"))
	for _, cp := range []Capability{a, b} {
		raw, _ := json.Marshal(cp)
		c.rdb.Set(ctx, CapabilityKey(cp.ID), raw, time.Minute)
		c.rdb.ZAdd(ctx, CapabilitiesIndex, redisZ(time.Now().Add(time.Minute), cp.ID))
	}
	var queues []string
	for range 2*affinityBacklogPerSlot + 1 {
		job, err := c.Enqueue(ctx, askAbout(doc, "How many?"))
		if err != nil {
			t.Fatal(err)
		}
		queues = append(queues, job.Queue)
	}
	want := []string{"default@a@worker-a", "default@a@worker-a", "default@a@worker-b", "default@a@worker-b", "default@a@ctx5000"}
	if !slices.Equal(queues, want) {
		t.Errorf("queues %v, want %v", queues, want)
	}
	if n, _ := c.rdb.HGet(ctx, AffinityKey, "routed").Int(); n != 4 {
		t.Errorf("%d jobs counted as routed by affinity, want 4", n)
	}
	job, err := c.Enqueue(ctx, askAbout(document(8001)[1:], "How many?"))
	if err != nil || job.Queue != "default@a@ctx5000" {
		t.Errorf("another document: %+v %v", job, err)
	}
}

func FuzzPrefixKeys(f *testing.F) {
	f.Add(document(3000), 1000, "m")
	f.Fuzz(func(t *testing.T, text string, cut int, model string) {
		if cut < 0 || cut > len(text) {
			return
		}
		short, long := PrefixKeys(&Generate{Prompt: text[:cut]}, model), PrefixKeys(&Generate{Prompt: text}, model)
		if len(short) != (cut+4)/PrefixStride || len(long) != (len(text)+4)/PrefixStride { // after "raw\x00"
			t.Fatalf("%d and %d keys for %d and %d bytes", len(short), len(long), cut, len(text))
		}
		if !slices.Equal(long[:len(short)], short) {
			t.Fatal("a prompt and its extension do not share their keys")
		}
	})
}

// BenchmarkEnqueueAffinity is BenchmarkEnqueueRouted with every worker publishing a full set
// of prefix keys (MaxPublishedPrefixes) and the job a 16 KiB document that one of them read:
// what affinity adds to an enqueue (the job's keys, the match, one LLEN per candidate).
func BenchmarkEnqueueAffinity(b *testing.B) {
	doc := document(16 << 10)
	for _, workers := range []int{8, 64} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			srv := redistest.Start(b)
			c, err := NewClient(srv.URL(0))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			for i := range workers {
				cp := benchCapability(i)
				for q, w := range AffinityQueues(QueueWeights(), cp.ModelKey, cp.Worker) {
					cp.Queues[q] = w
				}
				for j := 0; len(cp.Prefixes) < MaxPublishedPrefixes; j++ {
					cp.Prefixes = append(cp.Prefixes, RecordedPrefixes(PrefixKeys(askAbout(strconv.Itoa(i)+"."+strconv.Itoa(j)+document(4096), "?"), cp.ModelKey))...)
				}
				if i == 0 {
					cp.Prefixes = append(RecordedPrefixes(PrefixKeys(askAbout(doc, "When?"), cp.ModelKey)), cp.Prefixes[:MaxPublishedPrefixes-12]...)
				}
				data, _ := json.Marshal(cp)
				c.rdb.Set(ctx, CapabilityKey(cp.ID), data, time.Hour)
				c.rdb.ZAdd(ctx, CapabilitiesIndex, redisZ(time.Now().Add(time.Hour), cp.ID))
			}
			p := askAbout(doc, "How many?")
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Enqueue(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
