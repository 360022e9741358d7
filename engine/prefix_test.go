package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/internal/fixtures"
)

// slidingWindow is the sliding-window layers' window of m's file, 0 without one.
func slidingWindow(t *testing.T, m *Model) int {
	t.Helper()
	w, err := m.File.IntOr(m.Config().Arch+".attention.sliding_window", 0)
	if err != nil {
		t.Fatal(err)
	}
	return int(w)
}

// onePerArch is the first fixture model (in fixtures.Models' order: the F16 or F32 file
// where there is one) of each architecture. The prefix tests whose subject is the cache's
// bookkeeping run on these; TestPrefixParity, whose subject is the arithmetic, on every file.
func onePerArch(t *testing.T) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for _, name := range fixtures.Models(t) {
		f, err := gguf.Open(fixtures.Path(t, "models", name+".gguf"))
		if err != nil {
			t.Fatal(err)
		}
		arch, err := f.Architecture()
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !seen[arch] {
			seen[arch] = true
			out = append(out, name)
		}
	}
	return out
}

// TestPrefixParity reads a prompt's first blocks in one sequence, shares them as the prefix
// cache does (KV blocks by reference, the recurrent state copied), and starts a second
// sequence from them: every logit of the second prompt's rest must be within the batch
// parity tolerance of the same prompt prefilled from nothing, on every fixture model
// (fixtures.Models: a new one is covered when it is added), f32, f16 and q8_0 KV. The first
// sequence goes on past the shared blocks unchanged. The shared prefix is longer than any
// model's sliding window, so the restored blocks hold positions the window has left.
func TestPrefixParity(t *testing.T) {
	const bs, shared = 16, 48
	for _, name := range fixtures.Models(t) {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name+".gguf")
			if w := slidingWindow(t, m); w >= shared {
				t.Fatalf("sliding window %d: a shared prefix of %d tokens does not reach past it", w, shared)
			}
			vocab := m.Config().Vocab
			rng := rand.New(rand.NewPCG(3, 4))
			a := randomTokens(rng, 100, vocab)
			b := append(slices.Clone(a[:shared]), randomTokens(rng, 40, vocab)...)
			for _, kv := range ml.KVTypes {
				pool, err := m.Graph.NewKVPool(m.Backend, 20, bs, kv)
				if err != nil {
					t.Fatal(err)
				}
				first, err := m.Graph.NewPooledState(m.Backend, pool, len(a))
				if err != nil {
					t.Fatal(err)
				}
				forward(t, m, first, a[:shared], 0)
				blocks, err := pool.Share(first.KV(), shared/bs)
				if err != nil {
					t.Fatal(err)
				}
				rec, err := first.SaveRecurrent(m.Backend)
				if err != nil {
					t.Fatal(err)
				}
				aRest := forward(t, m, first, a[shared:], shared) // writes past the shared blocks only
				first.Free()

				c, err := pool.AllocShared(blocks, len(b))
				if err != nil {
					t.Fatal(err)
				}
				second, err := m.Graph.NewStateOn(m.Backend, c)
				if err != nil {
					t.Fatal(err)
				}
				if err := second.RestoreRecurrent(m.Backend, rec); err != nil {
					t.Fatal(err)
				}
				got := forward(t, m, second, b[shared:], shared)
				second.Free()
				blocks.Release()
				if pool.FreeBlocks() != pool.Blocks() {
					t.Errorf("%d of %d blocks free after every holder let go", pool.FreeBlocks(), pool.Blocks())
				}

				// The same two passes over a state of its own: the restored blocks and
				// recurrent state are the very values this one computes, so every logit is
				// the same bit for bit.
				fresh, err := m.Graph.NewPooledState(m.Backend, pool, len(b))
				if err != nil {
					t.Fatal(err)
				}
				forward(t, m, fresh, b[:shared], 0)
				own := forward(t, m, fresh, b[shared:], shared)
				fresh.Free()
				pool.Free()
				if d := compare(got, own, vocab); d.max != 0 {
					t.Errorf("%v KV: restored prefix vs the same passes from nothing: %v, want equal", kv, d)
				}

				tol := fixtures.BatchTolerance(name, kv)
				want := allLogits(t, m, b, 0, kv)[shared*vocab:]
				if d := compare(got, want, vocab); d.max > tol || d.argmax != 1 {
					t.Errorf("%v KV: restored prefix vs full prefill: %v, want max ≤ %g", kv, d, tol)
				} else {
					t.Logf("%v KV: restored prefix vs full prefill: %v", kv, d)
				}
				if d := compare(aRest, allLogits(t, m, a, 0, kv)[shared*vocab:], vocab); d.max > tol {
					t.Errorf("%v KV: the sharing sequence's own rest: %v, want max ≤ %g", kv, d, tol)
				}
			}
		})
	}
}

// forward runs tokens at positions pos0… of s in one pass and returns all their logits.
func forward(t *testing.T, m *Model, s model.State, tokens []int32, pos0 int) []float32 {
	t.Helper()
	b := model.Single(s, tokens, pos0, true)
	out, err := runPass(m.Backend, func(ctx ml.Context) ml.Tensor { return m.Graph.Forward(ctx, b) })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// greedyAlone is each prompt's greedy continuation in a session of its own.
func greedyAlone(t *testing.T, m *Model, prompts [][]int32, maxTokens int, kv ml.DType) []Generation {
	t.Helper()
	tok, err := m.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Generation, len(prompts))
	for i, p := range prompts {
		s, err := m.NewSession(SessionOptions{Context: len(p) + maxTokens, KV: kv})
		if err != nil {
			t.Fatal(err)
		}
		out[i], err = s.Generate(context.Background(), p, GenerateOptions{MaxTokens: maxTokens, Stream: tok.NewStreamDecoder(), Logprobs: true})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestSchedulerPrefixCache runs prompts that share a document and differ in their last
// tokens through a scheduler with the prefix cache, one after the other: the first reads the
// document, the others start from its blocks. Every greedy continuation equals the prompt's
// alone, every generated token's log-probability is within the batch tolerance, CachedTokens
// says how much was reused, and every block not held by the cache is back in the pool.
func TestSchedulerPrefixCache(t *testing.T) {
	const bs, doc, maxTokens = 16, 70, 10
	for _, name := range onePerArch(t) {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name+".gguf")
			tok, err := m.Tokenizer()
			if err != nil {
				t.Fatal(err)
			}
			vocab := m.Config().Vocab
			rng := rand.New(rand.NewPCG(5, 6))
			document := randomTokens(rng, doc, vocab)
			var prompts [][]int32
			for i := range 4 {
				prompts = append(prompts, append(slices.Clone(document), randomTokens(rng, 3+4*i, vocab)...))
			}
			prompts = append(prompts, slices.Clone(prompts[1])) // the same prompt again
			for _, kv := range ml.KVTypes {
				alone := greedyAlone(t, m, prompts, maxTokens, kv)
				sch, err := m.NewScheduler(SchedulerOptions{KV: kv, Slots: 2, Blocks: 24, BlockSize: bs, StepTokens: 40,
					Prefix: &PrefixCacheOptions{MaxBytes: 64 << 20}})
				if err != nil {
					t.Fatal(err)
				}
				for i, p := range prompts {
					g, err := sch.Generate(context.Background(), p, 0, GenerateOptions{MaxTokens: maxTokens, Stream: tok.NewStreamDecoder(), Logprobs: true})
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(g.Tokens, alone[i].Tokens) {
						t.Errorf("%v KV prompt %d: greedy %v with the cache, %v alone", kv, i, g.Tokens, alone[i].Tokens)
					}
					for j := range min(len(g.Logprobs), len(alone[i].Logprobs)) {
						if d := math.Abs(float64(g.Logprobs[j].Logprob - alone[i].Logprobs[j].Logprob)); d > 2*fixtures.BatchTolerance(name, kv) {
							t.Errorf("%v KV prompt %d token %d: logprob %g with the cache, %g alone", kv, i, j, g.Logprobs[j].Logprob, alone[i].Logprobs[j].Logprob)
						}
					}
					want := doc / bs * bs
					switch {
					case i == 0:
						want = 0
					case i == 4:
						want = (len(p) - 1) / bs * bs
					}
					if g.CachedTokens != want {
						t.Errorf("%v KV prompt %d: %d cached tokens, want %d", kv, i, g.CachedTokens, want)
					}
				}
				st := sch.PrefixStats()
				if st.Hits != 4 || st.Lookups != 5 || st.KVBlocks == 0 {
					t.Errorf("%v KV: stats %+v, want 4 hits of 5 lookups and blocks held", kv, st)
				}
				if free := sch.FreeBlocks(); free+st.KVBlocks != 24 {
					t.Errorf("%v KV: %d blocks free and %d cached, want 24 together", kv, free, st.KVBlocks)
				}
				sch.Close()
			}
		})
	}
}

// TestPrefixCacheBounded runs a random workload — prompts drawn from a few shared
// documents with random tails, submitted at once to a scheduler of few slots and a small
// pool, so that prefixes are cached, hit, evicted for blocks and spilled — and checks after
// every step that the memory held beside the pool and the directory stay within their
// bounds. Greedy outputs equal each prompt's alone, whether its prefix came from memory, disk
// or nowhere.
func TestPrefixCacheBounded(t *testing.T) {
	const bs, maxTokens = 16, 6
	for _, name := range []string{"tiny-qwen3-F32", "tiny-qwen3next-F16"} {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name+".gguf")
			tok, err := m.Tokenizer()
			if err != nil {
				t.Fatal(err)
			}
			vocab := m.Config().Vocab
			rng := rand.New(rand.NewPCG(9, 10))
			var docs [][]int32
			for range 4 {
				docs = append(docs, randomTokens(rng, 20+rng.IntN(60), vocab))
			}
			var prompts [][]int32
			for range 24 {
				d := docs[rng.IntN(len(docs))]
				prompts = append(prompts, append(slices.Clone(d), randomTokens(rng, 1+rng.IntN(20), vocab)...))
			}
			alone := greedyAlone(t, m, prompts, maxTokens, ml.F32)

			rec := m.Graph.(model.Facts).RecurrentBytes()
			maxBytes := 3*rec + rec/2 // three checkpoints and a half
			if rec == 0 {
				maxBytes = 1 << 20
			}
			dir := t.TempDir()
			blockBytes := int64(bs) * m.Graph.(model.Facts).KVBytesPerPosition(ml.F32)
			maxDisk := 10*blockBytes + 3*rec // a few snapshots, not all
			var mu sync.Mutex
			var over []string
			var sch *Scheduler
			sch, err = m.NewScheduler(SchedulerOptions{KV: ml.F32, Slots: 3, Blocks: 24, BlockSize: bs, StepTokens: 48,
				Prefix: &PrefixCacheOptions{MaxBytes: maxBytes, Dir: dir, MaxDiskBytes: maxDisk},
				OnStep: func(StepStats) {
					st := sch.PrefixStats()
					var onDisk int64
					ents, _ := os.ReadDir(dir)
					for _, e := range ents {
						if info, err := e.Info(); err == nil {
							onDisk += info.Size()
						}
					}
					mu.Lock()
					defer mu.Unlock()
					if st.Bytes > maxBytes || st.DiskBytes > maxDisk || onDisk > maxDisk {
						over = append(over, "over a bound")
						t.Errorf("memory %d of %d bytes, disk %d (files %d) of %d", st.Bytes, maxBytes, st.DiskBytes, onDisk, maxDisk)
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer sch.Close()
			gens := make([]Generation, len(prompts))
			var wg sync.WaitGroup
			for i, p := range prompts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var err error
					gens[i], err = sch.Generate(context.Background(), p, 0, GenerateOptions{MaxTokens: maxTokens, Stream: tok.NewStreamDecoder()})
					if err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			for i := range prompts {
				if !slices.Equal(gens[i].Tokens, alone[i].Tokens) {
					t.Errorf("prompt %d (%d cached): greedy %v, %v alone", i, gens[i].CachedTokens, gens[i].Tokens, alone[i].Tokens)
				}
			}
			st := sch.PrefixStats()
			t.Logf("%+v", st)
			if st.Hits == 0 || st.Evictions == 0 {
				t.Errorf("the workload neither hit nor evicted: %+v", st)
			}
		})
	}
}

// TestPrefixDiskHit fills the directory from one scheduler and starts a second on it: its
// first prompt starts from the snapshot on disk, with the same greedy output; a damaged
// file is a miss, not an error. On a model of each architecture, with each KV precision.
func TestPrefixDiskHit(t *testing.T) {
	const bs = 16
	for _, name := range onePerArch(t) {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name+".gguf")
			tok, err := m.Tokenizer()
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range ml.KVTypes {
				t.Run(kv.String(), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(1, 2))
					p := randomTokens(rng, 50, m.Config().Vocab)
					alone := greedyAlone(t, m, [][]int32{p}, 5, kv)[0]
					dir := t.TempDir()
					o := SchedulerOptions{KV: kv, Slots: 1, Blocks: 8, BlockSize: bs, Prefix: &PrefixCacheOptions{MaxBytes: 64 << 20, Dir: dir, MaxDiskBytes: 64 << 20}}
					run := func() Generation {
						sch, err := m.NewScheduler(o)
						if err != nil {
							t.Fatal(err)
						}
						defer sch.Close()
						g, err := sch.Generate(context.Background(), p, 0, GenerateOptions{MaxTokens: 5, Stream: tok.NewStreamDecoder()})
						if err != nil {
							t.Fatal(err)
						}
						// Fill the pool with another prompt: the cached blocks are evicted, the
						// longest prefix spilled.
						if _, err := sch.Generate(context.Background(), randomTokens(rng, 8*bs-5, m.Config().Vocab), 8*bs, GenerateOptions{MaxTokens: 1, Stream: tok.NewStreamDecoder()}); err != nil {
							t.Fatal(err)
						}
						return g
					}
					if g := run(); g.CachedTokens != 0 || !slices.Equal(g.Tokens, alone.Tokens) {
						t.Fatalf("first run: %d cached, %v; want 0, %v", g.CachedTokens, g.Tokens, alone.Tokens)
					}
					if g := run(); g.CachedTokens != 48 || !slices.Equal(g.Tokens, alone.Tokens) {
						t.Errorf("from disk: %d cached, %v; want 48, %v", g.CachedTokens, g.Tokens, alone.Tokens)
					}
					files, _ := filepath.Glob(filepath.Join(dir, "*"+prefixFileExt))
					if len(files) == 0 {
						t.Fatal("nothing on disk")
					}
					for _, f := range files {
						if err := os.WriteFile(f, []byte("RLPFX001 damaged"), 0o644); err != nil {
							t.Fatal(err)
						}
					}
					if g := run(); g.CachedTokens != 0 || !slices.Equal(g.Tokens, alone.Tokens) {
						t.Errorf("damaged files: %d cached, %v; want 0, %v", g.CachedTokens, g.Tokens, alone.Tokens)
					}
				})
			}
		})
	}
}

// FuzzPrefixFile feeds the prefix directory's file parser arbitrary bytes: an error or a
// payload, never a panic.
func FuzzPrefixFile(f *testing.F) {
	f.Add([]byte("RLPFX001\x10\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), 16)
	f.Add([]byte("RLPFX001"), 0)
	f.Add([]byte{}, 1)
	f.Fuzz(func(t *testing.T, data []byte, positions int) {
		if p, err := parsePrefixFile(data, positions); err == nil && len(p) != len(data)-prefixFileHeader {
			t.Errorf("payload of %d bytes from a file of %d", len(p), len(data))
		}
	})
}

// TestSessionPrefixStore runs prompts sharing a document in sessions with a prefix store,
// one after the other: the first stores the state after the document's whole blocks, the
// others start from it; greedy outputs equal each prompt's without the store, f32 and f16.
// A store that keeps nothing in memory spills every snapshot to its directory, and a second
// store on that directory (a restarted worker) starts from the files.
func TestSessionPrefixStore(t *testing.T) {
	const bs, doc, maxTokens = 16, 70, 8
	files, kvs := onePerArch(t), ml.KVTypes
	if testing.Short() {
		files, kvs = []string{"tiny-qwen3-F32", "tiny-qwen3next-F16"}, []ml.DType{ml.F16}
	}
	for _, name := range files {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name+".gguf")
			tok, err := m.Tokenizer()
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 8))
			document := randomTokens(rng, doc, m.Config().Vocab)
			var prompts [][]int32
			for i := range 3 {
				prompts = append(prompts, append(slices.Clone(document), randomTokens(rng, 2+5*i, m.Config().Vocab)...))
			}
			for _, kv := range kvs {
				alone := greedyAlone(t, m, prompts, maxTokens, kv)
				dir := t.TempDir()
				for round, o := range []PrefixCacheOptions{{MaxBytes: 64 << 20}, {Dir: dir, MaxDiskBytes: 64 << 20}, {Dir: dir, MaxDiskBytes: 64 << 20}} {
					store, err := m.NewPrefixStore(bs, o)
					if err != nil {
						t.Fatal(err)
					}
					for i, p := range prompts {
						s, err := m.NewSession(SessionOptions{Context: len(p) + maxTokens, KV: kv, Prefixes: store})
						if err != nil {
							t.Fatal(err)
						}
						var done []int
						g, err := s.Generate(context.Background(), p, GenerateOptions{MaxTokens: maxTokens, Stream: tok.NewStreamDecoder(), OnPrefill: func(d, total int) { done = append(done, d) }})
						s.Close()
						if err != nil {
							t.Fatal(err)
						}
						want := doc / bs * bs
						switch {
						case round == 2:
							want = (len(p) - 1) / bs * bs // every prompt's own blocks were stored before
						case i == 0:
							want = 0
						}
						if g.CachedTokens != want || !slices.Equal(g.Tokens, alone[i].Tokens) || done[len(done)-1] != len(p) {
							t.Errorf("%v KV round %d prompt %d: %d cached (want %d), greedy %v (alone %v), progress %v", kv, round, i, g.CachedTokens, want, g.Tokens, alone[i].Tokens, done)
						}
					}
					st := store.Stats()
					if round > 0 && (st.Bytes != 0 || st.DiskEntries == 0) || round == 2 && st.DiskHits != 3 {
						t.Errorf("%v KV round %d: %+v", kv, round, st)
					}
				}
			}
		})
	}
}
