package metalkit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/redlite/batch/engine/quant"
)

// TestExpertKernelsThroughSlots runs the expert kernels (mat-vec, mat-mat and the fused sum)
// reading their experts through a slot table from an arena — permuted slots larger than an
// expert, the rest of the arena garbage — in rounds of at most a few experts, and checks
// their outputs bit for bit against the same kernels reading the weights in place in one
// dispatch.
func TestExpertKernelsThroughSlots(t *testing.T) {
	dev := testDevice(t)
	rng := rand.New(rand.NewPCG(24, 1))
	for _, typ := range []quant.Type{quant.F32, quant.Q8_0, quant.Q4_K, quant.IQ2_XXS, quant.IQ1_M} {
		for _, n := range []int{3, 70} {
			tc := newTailCase(rng, typ, n, n == 3)
			eb := int64(typ.RowBytes(tc.cols)) * int64(tc.rows)
			slotBytes := (eb + 2*scratchAlign) / scratchAlign * scratchAlign
			// Slot experts+1 is never used; every byte outside an expert's copy is 0xff
			// (NaN in f32, garbage scales in the block formats).
			arena := make([]byte, int64(tc.experts+2)*slotBytes)
			for i := range arena {
				arena[i] = 0xff
			}
			where := make([]int32, tc.experts)
			for e, s := range rng.Perm(tc.experts + 1)[:tc.experts] {
				where[e] = int32(s)
				copy(arena[int64(s)*slotBytes:], tc.w[int64(e)*eb:int64(e+1)*eb])
			}
			t.Run(fmt.Sprintf("%v/n=%d", typ, n), func(t *testing.T) {
				wr, ar := upload(t, dev, tc.w), upload(t, dev, arena)
				x, ids, ws := uploadF32(t, dev, tc.x), uploadF32(t, dev, tc.ids), uploadF32(t, dev, tc.ws)
				want := upload(t, dev, make([]byte, 4*n*tc.k*tc.rows))
				run(t, dev, func(e *encoder) {
					e.matMulExperts(typ, wr, tc.experts, tc.rows, tc.cols, x, tc.perSlot, ids, tc.k, want, n, allPairs(n, tc.k))
				})
				for _, slots := range []int{tc.experts, 2, 1} {
					rounds := planRounds(tc.ids, n, tc.k, tc.experts, slots)
					cached := func(r expertRound) expertRound {
						r.cached, r.slotBytes = true, slotBytes
						r.where = make([]int32, tc.experts)
						for i := range r.where {
							r.where[i] = -1
						}
						for _, x := range r.experts {
							r.where[x] = where[x]
						}
						return r
					}
					got := upload(t, dev, make([]byte, 4*n*tc.k*tc.rows))
					run(t, dev, func(e *encoder) {
						for _, r := range rounds {
							e.matMulExperts(typ, ar, tc.experts, tc.rows, tc.cols, x, tc.perSlot, ids, tc.k, got, n, cached(r))
						}
					})
					sameBits(t, fmt.Sprintf("products, %d rounds of at most %d experts", len(rounds), slots), readF32(t, want), readF32(t, got))
					if n > matVecMaxTokens {
						continue
					}
					sum := upload(t, dev, make([]byte, 4*n*tc.rows))
					run(t, dev, func(e *encoder) {
						e.matMulExpertsSum(typ, wr, tc.experts, tc.rows, tc.cols, x, tc.perSlot, ids, tc.k, ws, sum, n, allPairs(n, tc.k))
					})
					gotSum := upload(t, dev, make([]byte, 4*n*tc.rows))
					run(t, dev, func(e *encoder) {
						for _, r := range rounds {
							e.matMulExpertsSum(typ, ar, tc.experts, tc.rows, tc.cols, x, tc.perSlot, ids, tc.k, ws, gotSum, n, cached(r))
						}
					})
					sameBits(t, fmt.Sprintf("fused sums, %d rounds of at most %d experts", len(rounds), slots), readF32(t, sum), readF32(t, gotSum))
				}
			})
		}
	}
}

// sameBits fails unless got equals want bit for bit (any NaN equals any NaN).
func sameBits(t *testing.T, what string, want, got []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(isNaN32(got[i]) && isNaN32(want[i])) {
			t.Fatalf("%s: [%d] %g (%#x), in place %g (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// TestPlanRounds checks that the rounds of a product cover every pair once, route to at most
// the slots' experts each (a single pair always fits: the cache holds at least one slice),
// and give each token's slots in ascending order.
func TestPlanRounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	const experts = 16
	for _, c := range []struct{ n, k, slots int }{{1, 4, 16}, {1, 4, 4}, {1, 4, 3}, {1, 4, 1}, {5, 4, 6}, {70, 4, 16}, {70, 4, 5}, {9, 3, 2}} {
		ids := make([]float32, c.n*c.k)
		for i := 0; i < c.n; i++ {
			for j, e := range rng.Perm(experts)[:c.k] {
				ids[i*c.k+j] = float32(e)
			}
		}
		ids[0] = float32(math.NaN()) // a bad id takes no slot
		rounds := planRounds(ids, c.n, c.k, experts, c.slots)
		covered := make([]int, c.n*c.k)
		last := make([]int, c.n) // the next slot each token expects
		for _, r := range rounds {
			if len(r.experts) > c.slots {
				t.Errorf("%+v: round %+v routes to %d experts", c, r, len(r.experts))
			}
			if !slices.IsSorted(r.experts) {
				t.Errorf("%+v: round's experts %v not ascending", c, r.experts)
			}
			for tok := r.t0; tok < r.t1; tok++ {
				if last[tok] != r.s0 {
					t.Errorf("%+v: token %d's round starts at slot %d after %d", c, tok, r.s0, last[tok])
				}
				last[tok] = r.s1
				for s := r.s0; s < r.s1; s++ {
					covered[tok*c.k+s]++
					if v := ids[tok*c.k+s]; v == v && !slices.Contains(r.experts, int(v)) {
						t.Errorf("%+v: pair (%d, %d) routes to %v, not in its round's %v", c, tok, s, v, r.experts)
					}
				}
			}
		}
		for p, n := range covered {
			if n != 1 {
				t.Errorf("%+v: pair %d in %d rounds", c, p, n)
			}
		}
		if c.slots >= experts && len(rounds) != 1 {
			t.Errorf("%+v: %d rounds where every expert fits", c, len(rounds))
		}
	}
}

// TestExpertSlots checks the slot bookkeeping: hits and misses, the policies' victims,
// pinned slots never evicted, the counters.
func TestExpertSlots(t *testing.T) {
	key := func(e int) sliceKey { return sliceKey{0, e} }
	t.Run("LRU", func(t *testing.T) {
		s := newExpertSlots(3, policyLRU, 300)
		for _, e := range []int{1, 2, 3} {
			if _, miss := s.lookup(key(e), 100); !miss {
				t.Fatalf("expert %d: a hit in an empty cache", e)
			}
		}
		s.release()
		s.lookup(key(1), 100) // 2 is now the least recent
		s.release()
		slot2 := s.at[key(2)]
		slot, miss := s.lookup(key(4), 100)
		if !miss || slot != slot2 {
			t.Errorf("4 took slot %d (miss %v), want 2's slot %d", slot, miss, slot2)
		}
		if _, ok := s.at[key(2)]; ok {
			t.Errorf("2 still held")
		}
		want := struct{ h, m, e, b int64 }{1, 4, 1, 300}
		if st := s.stats; st.Hits != want.h || st.Misses != want.m || st.Evictions != want.e || st.Bytes != want.b || st.Capacity != 300 {
			t.Errorf("stats %+v, want hits %d misses %d evictions %d bytes %d", st, want.h, want.m, want.e, want.b)
		}
	})
	t.Run("LFU", func(t *testing.T) {
		s := newExpertSlots(3, policyLFU, 300)
		for _, e := range []int{1, 1, 1, 2, 2, 3} {
			s.lookup(key(e), 100)
		}
		s.release()
		for range 3 {
			s.lookup(key(3), 100) // 3 used most now, 2 least (twice), 1 most recent of the others
		}
		s.release()
		s.lookup(key(4), 100)
		if _, ok := s.at[key(2)]; ok {
			t.Errorf("LFU kept 2 (used twice) over %v", s.at)
		}
		// LRU would have evicted 1, the least recent.
		lru := newExpertSlots(3, policyLRU, 300)
		for _, e := range []int{1, 1, 1, 2, 2, 3, 3, 3, 3} {
			lru.lookup(key(e), 100)
		}
		lru.release()
		lru.lookup(key(4), 100)
		if _, ok := lru.at[key(1)]; ok {
			t.Errorf("LRU kept 1, the least recent")
		}
	})
	t.Run("ShareVersusLRU", func(t *testing.T) {
		// Two weights of 4 experts each, every step using all of them (8 slices) through 6
		// slots, a wait between the weights: a global recency order evicts each slice
		// before the step comes back to it; shares keep some of each weight.
		hits := map[slotPolicy]int64{}
		for _, p := range []slotPolicy{policyLRU, policyShare} {
			s := newExpertSlots(6, p, 600)
			for step := range 20 {
				if step == 10 {
					s.stats.Hits = 0
				}
				for w := range 2 {
					s.release()
					var used []sliceKey
					for e := range 4 {
						k := sliceKey{w, e}
						s.lookup(k, 100)
						used = append(used, k)
						for _, u := range used {
							if _, ok := s.at[u]; !ok {
								t.Fatalf("%v: %v evicted while pinned", p, u)
							}
						}
					}
				}
			}
			hits[p] = s.stats.Hits
		}
		if hits[policyLRU] != 0 || hits[policyShare] == 0 {
			t.Errorf("hits in the last 10 steps %v: want none under LRU, some under the shares", hits)
		}
	})
	t.Run("Pinned", func(t *testing.T) {
		s := newExpertSlots(2, policyLRU, 200)
		s.lookup(key(1), 100)
		s.lookup(key(2), 100)
		if !s.needsWait(0, []int{3}) || s.needsWait(0, []int{1, 2}) {
			t.Errorf("needsWait: with both slots pinned 3 must wait, 1 and 2 need not")
		}
		defer func() {
			if recover() == nil {
				t.Errorf("a lookup with every slot pinned did not panic")
			}
		}()
		s.lookup(key(3), 100)
	})
	t.Run("PinnedNeverEvicted", func(t *testing.T) {
		// Under LRU a pinned slot is always among the most recent; under LFU a slice just
		// copied in is the least used, and it is pinned until its dispatch has run.
		s := newExpertSlots(2, policyLFU, 200)
		for _, e := range []int{1, 1, 1, 2, 2, 2} {
			s.lookup(key(e), 100)
		}
		s.release()
		s.lookup(key(3), 100) // evicts 1 (as used as 2, less recent); 3 used once, pinned
		if _, miss := s.lookup(key(4), 100); !miss {
			t.Fatal("4 hit")
		}
		if _, ok := s.at[key(3)]; !ok {
			t.Errorf("the pinned slice was evicted: %v", s.at)
		}
		if _, ok := s.at[key(2)]; ok {
			t.Errorf("2 (unpinned) kept: %v", s.at)
		}
	})
}

// BenchmarkExpertSlots times the host's bookkeeping of one decode step of Qwen3-Next-80B
// with a 4 GiB cache (15,887 slots of 264 KiB): 48 MoE layers of three weights, 10 of 512
// experts routed per layer, drawn at random (so most lookups miss: the bookkeeping's worst
// case; the copies are not timed).
func BenchmarkExpertSlots(b *testing.B) {
	const layers, experts, k, slots = 48, 512, 10, 15887
	rng := rand.New(rand.NewPCG(1, 2))
	steps := make([][][]float32, 64)
	for i := range steps {
		for range layers {
			ids := make([]float32, k)
			for j, e := range rng.Perm(experts)[:k] {
				ids[j] = float32(e)
			}
			steps[i] = append(steps[i], ids)
		}
	}
	for _, p := range []slotPolicy{policyLRU, policyLFU, policyShare} {
		b.Run(p.String(), func(b *testing.B) {
			s := newExpertSlots(slots, p, 4<<30)
			i := 0
			for b.Loop() {
				for l, ids := range steps[i%len(steps)] {
					s.release()
					for w := 3 * l; w < 3*l+3; w++ {
						for _, r := range planRounds(ids, 1, k, experts, slots) {
							if s.needsWait(w, r.experts) {
								s.release()
							}
							for _, e := range r.experts {
								s.lookup(sliceKey{w, e}, 264<<10)
							}
						}
					}
				}
				i++
			}
			b.ReportMetric(float64(s.stats.Misses)/float64(s.stats.Hits+s.stats.Misses), "miss-rate")
		})
	}
}
