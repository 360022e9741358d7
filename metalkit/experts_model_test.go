package metalkit

import (
	"bytes"
	"cmp"
	gocontext "context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/synth"
	"github.com/redlite/batch/internal/fixtures"
)

// routeTrace is the routing of a run: for each pass, each MoE layer's routed experts per
// token (the k most probable of the router's logits, ties to the lower id, as Route chooses).
type routeTrace [][][][]int

// traceRouting makes hook record the routing of the passes of a backend whose Hook it is,
// from the router logits every qwen3next MoE layer names ffn_moe_logits.
func traceRouting(k int) (*routeTrace, func(name string, layer int, shape []int, data []float32)) {
	var (
		mu   sync.Mutex
		tr   routeTrace
		last = -1
	)
	return &tr, func(name string, layer int, shape []int, data []float32) {
		if name != "ffn_moe_logits" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if layer <= last || len(tr) == 0 {
			tr = append(tr, nil) // layers come in order within a pass
		}
		last = layer
		n, experts := shape[0], shape[1]
		var toks [][]int
		for i := 0; i < n; i++ {
			row := data[i*experts : (i+1)*experts]
			order := make([]int, experts)
			for e := range order {
				order[e] = e
			}
			slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(row[b], row[a]) })
			toks = append(toks, order[:k])
		}
		tr[len(tr)-1] = append(tr[len(tr)-1], toks)
	}
}

// replay runs a trace through the cache's bookkeeping as the backend does (experts.go):
// each MoE layer waits for its routing, then gate, up and down look up their rounds' experts
// (ascending), waiting first when the unpinned slots do not hold a round; each pass ends
// with a wait.
func replay(tr routeTrace, slots int, policy slotPolicy, experts int) ml.ExpertStats {
	s := newExpertSlots(slots, policy, 0)
	for _, pass := range tr {
		for l, toks := range pass {
			s.release()
			n, k := len(toks), len(toks[0])
			ids := make([]float32, 0, n*k)
			for _, tok := range toks {
				for _, e := range tok {
					ids = append(ids, float32(e))
				}
			}
			for w := 3 * l; w < 3*l+3; w++ {
				for _, r := range planRounds(ids, n, k, experts, slots) {
					if s.needsWait(w, r.experts) {
						s.release()
					}
					for _, e := range r.experts {
						s.lookup(sliceKey{w, e}, 1)
					}
				}
			}
		}
		s.release()
	}
	return s.stats
}

// TestExpertCacheForward runs the IQ2_XXS tiny-qwen3next fixture (IQ2_XXS and other experts:
// slices of several sizes) on the harness with an expert cache of a handful of slots — fewer
// than a quarter of the slices, fewer than one prefill chunk routes to, and a single slot —
// and checks: logits bit-identical to full residency, prefill (the mat-mat kernel, in
// rounds) and decode (the fused sum); hit, miss and eviction counts equal to replaying the
// run's routing through the cache's bookkeeping and policy; and every held slot holding its
// slice's bytes from the file.
func TestExpertCacheForward(t *testing.T) {
	dev := testDevice(t)
	path := fixtures.Path(t, "models", "tiny-qwen3next-IQ2_XXS.gguf")
	full, err := engine.Load(path, engine.Options{Backend: New(dev)})
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	k, err := full.File.Int("qwen3next.expert_used_count")
	if err != nil {
		t.Fatal(err)
	}
	experts, err := full.File.Int("qwen3next.expert_count")
	if err != nil {
		t.Fatal(err)
	}
	vocab := full.Config().Vocab
	ids := make([]int32, 12)
	for i := range ids {
		ids[i] = int32((i*7919 + 13) % vocab)
	}
	const prompt, decode = 12, 4 // tokens prefilled whole, tokens prefilled one at a time
	want := [][]float32{prefill(t, full, ids[:prompt], ml.F32, 0), prefill(t, full, ids[:decode], ml.F32, 1)}
	if st := full.Backend.(*Backend).ExpertStats(); st != (ml.ExpertStats{}) {
		t.Errorf("full residency counted %+v", st)
	}

	sizes := []int64{10, 1}
	if testing.Short() {
		sizes = sizes[:1] // about 25 s on the harness; a single slot, 45 s more
	}
	for _, slots := range sizes {
		t.Run(fmt.Sprintf("slots=%d", slots), func(t *testing.T) {
			b := New(dev)
			tr, hook := traceRouting(int(k))
			b.Hook = hook
			m, err := engine.Load(path, engine.Options{Backend: b})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			a := &b.experts
			if 4*slots >= a.slices {
				t.Fatalf("%d slots of %d slices: not under a quarter", slots, a.slices)
			}
			size := (a.largest + scratchAlign - 1) / scratchAlign * scratchAlign
			if err := b.SetExpertCache(slots*size + size/2); err != nil {
				t.Fatal(err)
			}
			got := [][]float32{prefill(t, m, ids[:prompt], ml.F32, 0), prefill(t, m, ids[:decode], ml.F32, 1)}
			for i := range want {
				if d, at := logitsDiff(want[i], got[i]); d != 0 {
					t.Errorf("run %d: logits differ from full residency by %g at %d", i, d, at)
				}
			}
			if a.slots.n != int(slots) {
				t.Fatalf("arena of %d slots, want %d", a.slots.n, slots)
			}
			st := b.ExpertStats()
			sim := replay(*tr, int(slots), a.policy, int(experts))
			if st.Hits != sim.Hits || st.Misses != sim.Misses || st.Evictions != sim.Evictions {
				t.Errorf("counters %+v; replaying the routing gives %+v", st, sim)
			}
			if st.Misses == 0 || st.Evictions == 0 || st.Capacity != slots*size+size/2 || st.Bytes <= 0 || st.Bytes > slots*size {
				t.Errorf("counters %+v", st)
			}
			t.Logf("%d passes; %+v", len(*tr), st)
			// The fill path: every held slot has its slice's bytes.
			for i := range a.slots.slot {
				s := a.slots.slot[i]
				if !s.held {
					continue
				}
				w := a.weights[s.key.weight]
				buf := make([]byte, w.slice)
				if err := a.buf.Read(int64(i)*a.slotBytes, buf); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf, w.host[int64(s.key.expert)*w.slice:int64(s.key.expert+1)*w.slice]) {
					t.Errorf("slot %d: not the bytes of expert %d of %s", i, s.key.expert, w.name)
				}
			}
		})
	}
}

// TestSlotPolicyTrace measures the eviction policies on routing traces of the CPU engine:
// the tiny-qwen3next fixture (REDLITE_TEST_TRACE=mini: the qwen3next-mini synth, 64 experts
// of Qwen3-Next-80B's size, 10 used, Q8_0; about 2 minutes on 2 loaded cores). Single: one
// session prefills 64 tokens of docs/architecture.md at once and then 256 one at a time, as
// decode steps would. Batched: a scheduler of 4 slots admits 4 prompts of 64 tokens of it
// (different places) in one step and generates 64 tokens each greedily, every decode step
// one forward pass of 4 tokens. Each trace is replayed through the cache's bookkeeping with
// LRU, LFU and the share policy at an eighth, a quarter and a half of the slices. It logs
// the misses per decode step (metalkit/README.md quotes them) and checks that a cache of
// every slice only misses each slice once.
func TestSlotPolicyTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement: about 30 s on the CPU")
	}
	path := fixtures.Path(t, "models", "tiny-qwen3next-IQ2_XXS.gguf")
	if os.Getenv("REDLITE_TEST_TRACE") == "mini" {
		path = filepath.Join(t.TempDir(), "mini.gguf")
		if _, err := synth.WriteFile(gocontext.Background(), path, "qwen3next-mini", synth.Options{Type: synth.Q8_0, Seed: 5}); err != nil {
			t.Fatal(err)
		}
	}
	b := cpu.New(0)
	m, err := engine.Load(path, engine.Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	k, err1 := m.File.Int(m.Config().Arch + ".expert_used_count")
	experts, err2 := m.File.Int(m.Config().Arch + ".expert_count")
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	tok, err := m.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join("..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	const prompt, steps = 64, 256
	ids := tok.Encode(string(text), false)
	if len(ids) < prompt+steps {
		t.Fatalf("%d tokens of text", len(ids))
	}
	t.Logf("%s: %d of %d experts used", filepath.Base(path), k, experts)

	t.Run("single", func(t *testing.T) {
		tr, hook := traceRouting(int(k))
		b.Hook = hook
		defer func() { b.Hook = nil }()
		s, err := m.NewSession(engine.SessionOptions{Context: prompt + steps})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Prefill(gocontext.Background(), ids[:prompt], engine.PrefillOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Prefill(gocontext.Background(), ids[prompt:prompt+steps], engine.PrefillOptions{Chunk: 1}); err != nil {
			t.Fatal(err)
		}
		if len(*tr) != 1+steps {
			t.Fatalf("%d passes traced, want %d", len(*tr), 1+steps)
		}
		policyTable(t, *tr, int(experts))
	})

	t.Run("batched", func(t *testing.T) {
		const seqs, gen = 4, 64
		tr, hook := traceRouting(int(k))
		b.Hook = hook
		defer func() { b.Hook = nil }()
		sch, err := m.NewScheduler(engine.SchedulerOptions{KV: ml.F32, Slots: seqs, Blocks: 4 * seqs, BlockSize: 64, StepTokens: seqs * prompt})
		if err != nil {
			t.Fatal(err)
		}
		defer sch.Close()
		var prompts [][]int32
		for i := range seqs {
			at := i * (len(ids) - prompt) / seqs
			prompts = append(prompts, ids[at:at+prompt])
		}
		if err := sch.GenerateTogether(gocontext.Background(), prompts, prompt+gen, engine.GenerateOptions{MaxTokens: gen, Stream: engine.DiscardText{}}); err != nil {
			t.Fatal(err)
		}
		if len(*tr) < 2 || len((*tr)[0][0]) != seqs*prompt {
			t.Fatalf("%d passes traced, the first of %d tokens: want the prompts' %d, then steps", len(*tr), len((*tr)[0][0]), seqs*prompt)
		}
		for i, pass := range (*tr)[1:] {
			if len(pass[0]) != seqs {
				t.Fatalf("decode step %d of %d tokens, want %d", i, len(pass[0]), seqs)
			}
		}
		policyTable(t, *tr, int(experts))
	})
}

// policyTable logs the misses per step after the first pass of tr (the prefill) for each
// policy at 1/8, 1/4, 1/2 and all of the slices, and checks that a cache of every slice
// misses each slice once.
func policyTable(t *testing.T, tr routeTrace, experts int) {
	t.Helper()
	steps := len(tr) - 1
	total := 3 * experts * len(tr[0])
	distinct := map[sliceKey]bool{}
	for _, pass := range tr {
		for l, toks := range pass {
			for _, tk := range toks {
				for _, e := range tk {
					for w := 3 * l; w < 3*l+3; w++ {
						distinct[sliceKey{w, e}] = true
					}
				}
			}
		}
	}
	policies := []slotPolicy{policyLRU, policyLFU, policyShare}
	t.Logf("%d slices, %d MoE layers, %d tokens a step; misses per decode step (%d steps):", total, len(tr[0]), len(tr[1][0]), steps)
	t.Logf("| cache | %v | %v | %v |", policies[0], policies[1], policies[2])
	for _, frac := range []int{8, 4, 2, 1} {
		n := total / frac
		row := fmt.Sprintf("| %d slots (1/%d) |", n, frac)
		for _, p := range policies {
			warm := replay(tr[:1], n, p, experts)
			all := replay(tr, n, p, experts)
			row += fmt.Sprintf(" %.2f |", float64(all.Misses-warm.Misses)/float64(steps))
			if frac == 1 && (all.Misses != int64(len(distinct)) || all.Evictions != 0) {
				t.Errorf("%v with every slice: %+v, want %d misses (each slice once), no evictions", p, all, len(distinct))
			}
		}
		t.Log(row)
	}
}
