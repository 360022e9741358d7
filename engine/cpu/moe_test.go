package cpu

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

func TestRoute(t *testing.T) {
	c := New(1).NewContext().(*context)
	// Row 0: a clear order. Row 1: a tie between experts 1 and 3 goes to the lower id.
	logits := hostTensor([]float32{0, 2, 1, -1, 0, 1, -3, 1}, 2, 4)
	idt, wt := c.Route(logits, 2, false)
	_, wnt := c.Route(logits, 2, true)
	ids, w, wn := values(t, c, idt), values(t, c, wt), values(t, c, wnt)
	if got := ids; !equal32(got, []float32{1, 2, 1, 3}) {
		t.Fatalf("ids %v, want [1 2 1 3]", got)
	}
	e := []float64{1, math.E * math.E, math.E, 1 / math.E}
	sum := e[0] + e[1] + e[2] + e[3]
	want := []float64{e[1] / sum, e[2] / sum}
	for i, v := range w[:2] {
		if math.Abs(float64(v)-want[i]) > 1e-6 {
			t.Fatalf("weights %v, want %v", w[:2], want)
		}
	}
	for i := 0; i < 2; i++ {
		row := wn[2*i : 2*i+2]
		if s := row[0] + row[1]; math.Abs(float64(s)-1) > 1e-6 {
			t.Fatalf("normalized weights %v sum to %v", row, s)
		}
	}
}

// expertStack is a random Q8_0 [experts, rows, cols] weight.
func expertStack(t testing.TB, b *Backend, rng *rand.Rand, experts, rows, cols int) ml.Weight {
	t.Helper()
	nb := experts * rows * cols / 32
	data := make([]byte, 0, nb*34)
	for range nb {
		d := quant.F32ToF16(float32(0.001 + 0.01*rng.Float64()))
		data = append(data, byte(d), byte(d>>8))
		for range 32 {
			data = append(data, byte(rng.IntN(256)))
		}
	}
	w, err := weightOf(b, "ffn_up_exps.weight", quant.Q8_0, []int{cols, rows, experts}, data)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func randomTensor(rng *rand.Rand, shape ...int) *tensor {
	x := newTensor(shape...)
	for i := range x.data {
		x.data[i] = float32(rng.NormFloat64())
	}
	return x
}

// TestMatMulExperts checks each (token, slot) product against the dense product with that
// expert's rows, for x shared by the slots and x per slot.
func TestMatMulExperts(t *testing.T) {
	// 40 rows end in a partial tile; 48 are whole groups, repacked where the machine has
	// the kernels, against the dense products over the rows as stored.
	for _, rows := range []int{40, 48} {
		t.Run(fmt.Sprint(rows), func(t *testing.T) { testMatMulExperts(t, rows) })
	}
}

func testMatMulExperts(t *testing.T, rows int) {
	b := New(2)
	c := b.NewContext().(*context)
	rng := rand.New(rand.NewPCG(1, 1))
	const experts, cols, n, k = 6, 64, 5, 3
	w := expertStack(t, b, rng, experts, rows, cols).(*weight)
	ids := newTensor(n, k)
	for i := range ids.data {
		ids.data[i] = float32(rng.IntN(experts))
	}
	for _, x := range []*tensor{randomTensor(rng, n, cols), randomTensor(rng, n, k, cols)} {
		got := values(t, c, c.MatMulExperts(w, x, ids))
		for i := 0; i < n; i++ {
			for j := 0; j < k; j++ {
				e := int(ids.data[i*k+j])
				xi := x.data[i*cols : (i+1)*cols]
				if len(x.shape) == 3 {
					xi = x.data[(i*k+j)*cols : (i*k+j+1)*cols]
				}
				size := rows * w.rowB
				view := expertView(w, e, w.data[e*size:(e+1)*size])
				want := values(t, c, c.MatMul(view, hostTensor(xi, 1, cols)))
				if !equal32(got[(i*k+j)*rows:(i*k+j+1)*rows], want) {
					t.Fatalf("x %v: token %d slot %d (expert %d) differs from the dense product", x.shape, i, j, e)
				}
			}
		}
	}
}

// TestExpertCache runs expert products from several goroutines through a cache smaller
// than one product's experts and checks the results against all-resident ones, and that
// the cache stays within its capacity once nothing is in use.
func TestExpertCache(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	const experts, rows, cols, n, k = 8, 32, 64, 6, 4
	resident := New(2)
	w := expertStack(t, resident, rng, experts, rows, cols)
	x := randomTensor(rng, n, cols)
	ids := newTensor(n, k)
	for i := range ids.data {
		ids.data[i] = float32(rng.IntN(experts))
	}
	rc := resident.NewContext()
	want := values(t, rc, rc.MatMulExperts(w, x, ids))

	cached := New(2)
	slice := int64(rows * w.(*weight).rowB)
	if err := cached.SetExpertCache(2*slice + slice/2); err != nil {
		t.Fatal(err)
	}
	wc, err := weightOf(cached, w.Name(), w.Type(), w.Dims(), w.(*weight).data)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				cc := cached.NewContext()
				got := cc.MatMulExperts(wc, x, ids)
				if err := cc.Compute(); err != nil {
					errs <- err.Error()
					return
				}
				if v, _ := cc.Read(got); !equal32(v, want) {
					errs <- "cached product differs from the resident one"
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	st := cached.ExpertStats()
	t.Logf("stats %+v", st)
	if st.Bytes > st.Capacity || st.Misses == 0 || st.Hits == 0 {
		t.Errorf("stats %+v: want hits and misses, and at most %d bytes held", st, st.Capacity)
	}
	if err := cached.SetExpertCache(-1); err == nil {
		t.Error("a negative cache size was accepted")
	}

	// Experts repacked at load, every one resident, go when a bounded cache is set; the
	// numbers stay.
	wr := w.(*weight)
	if repacks := quant.Int8Repacked(quant.Q8_0); (wr.packed != nil) != repacks || (resident.HostWeightBytes() > 0) != repacks {
		t.Fatalf("repacked experts: %v, %d bytes held; the machine's kernels want %v", wr.packed != nil, resident.HostWeightBytes(), repacks)
	}
	if err := resident.SetExpertCache(slice * 3); err != nil {
		t.Fatal(err)
	}
	if wr.packed != nil || resident.HostWeightBytes() != 0 {
		t.Errorf("a bounded cache kept the load's repacked experts (%d bytes)", resident.HostWeightBytes())
	}
	rc = resident.NewContext()
	if got := values(t, rc, rc.MatMulExperts(w, x, ids)); !equal32(got, want) {
		t.Error("the product changed with the load's repacked experts gone")
	}
}

// cacheWeights makes n weights of experts slices of 64 bytes each for the cache alone.
func cacheWeights(n, experts int) []*weight {
	var ws []*weight
	for i := range n {
		ws = append(ws, &weight{name: fmt.Sprintf("blk.%d.ffn_up_exps", i), dims: []int{16, 1, experts}, rows: experts, cols: 16, rowB: 64, data: make([]byte, experts*64)})
	}
	return ws
}

// TestExpertCachePolicy checks the bounded cache's policy on lookups alone. A pass that walks
// eight weights in order and touches half of each one's experts, with a cache of a quarter
// of them, still hits (least recently used order would evict each weight's slices before
// the pass returns to it and never hit); a weight whose hot experts move ends up holding the
// new ones; the cache never holds more than its capacity, and a lookup it does not admit
// reads the slice in place.
func TestExpertCachePolicy(t *testing.T) {
	t.Run("Cyclic", func(t *testing.T) {
		const experts = 16
		var c expertCache
		ws := cacheWeights(8, experts)
		c.capacity = int64(len(ws)*experts*64) / 4
		c.sets, c.stats.Capacity = map[*weight]*expertSet{}, c.capacity
		rng := rand.New(rand.NewPCG(4, 4))
		for range 300 {
			for _, w := range ws {
				for _, e := range rng.Perm(experts)[:experts/2] {
					data, _, release := c.get(w, e)
					if !bytes.Equal(data, w.data[e*64:(e+1)*64]) || c.stats.Bytes > c.capacity {
						t.Fatalf("expert %d of %s: %d bytes held of %d", e, w.name, c.stats.Bytes, c.capacity)
					}
					release()
				}
			}
		}
		rate := float64(c.stats.Hits) / float64(c.stats.Hits+c.stats.Misses)
		t.Logf("%+v, hit rate %.2f", c.stats, rate)
		if rate < 0.15 {
			t.Errorf("hit rate %.2f with a quarter of the experts cached, want near 0.25", rate)
		}
	})
	t.Run("HotSetMoves", func(t *testing.T) {
		var c expertCache
		w := cacheWeights(1, 16)[0]
		c.capacity, c.sets = 4*64, map[*weight]*expertSet{}
		for _, hot := range [][]int{{0, 1, 2, 3}, {8, 9, 10, 11}} {
			for range 100 {
				for _, e := range hot {
					_, _, release := c.get(w, e)
					release()
				}
			}
		}
		held := slices.Sorted(maps.Keys(c.sets[w].held))
		if !slices.Equal(held, []int{8, 9, 10, 11}) || c.stats.Evictions != 4 {
			t.Errorf("held %v after the hot experts moved to 8–11, %+v", held, c.stats)
		}
	})
}

// BenchmarkMoELayer times the routed experts of a Qwen3-Next-80B-shaped MoE block (hidden
// 2048, experts of 512, 10 of 64 chosen; Q8_0) for one decode token and a 64-token chunk,
// with all experts resident and with a cache of half of them.
func BenchmarkMoELayer(b *testing.B) {
	const d, ff, experts, used = 2048, 512, 64, 10
	for _, cache := range []bool{false, true} {
		be := New(0)
		rng := rand.New(rand.NewPCG(3, 3))
		gate := expertStack(b, be, rng, experts, ff, d)
		up := expertStack(b, be, rng, experts, ff, d)
		down := expertStack(b, be, rng, experts, d, ff)
		router := randomTensor(rng, d*experts)
		rw, err := weightOf(be, "ffn_gate_inp.weight", quant.F32, []int{d, experts}, f32bytes(router.data))
		if err != nil {
			b.Fatal(err)
		}
		name := "resident"
		if cache {
			name = "cache-half"
			slice := int64(ff*gate.(*weight).rowB) * 3
			if err := be.SetExpertCache(slice * experts / 2 * 4); err != nil { // four layers' worth of halves
				b.Fatal(err)
			}
		}
		for _, n := range []int{1, 64} {
			x := randomTensor(rng, n, d)
			b.Run(name+"/tokens="+strconv.Itoa(n), func(b *testing.B) {
				for b.Loop() {
					c := be.NewContext()
					ids, w := c.Route(c.MatMul(rw, x), used, true)
					y := c.MatMulExperts(down, c.SwiGLU(c.MatMulExperts(gate, x, ids), c.MatMulExperts(up, x, ids)), ids)
					c.WeightedSum(y, w)
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}
