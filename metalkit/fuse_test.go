package metalkit

import (
	stdcontext "context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/engine/synth"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
)

// tailCase is one expert product and weighted sum of the tests below.
type tailCase struct {
	typ                    quant.Type
	experts, rows, cols, k int
	n                      int
	perSlot                bool
	w                      []byte
	x, ids, ws             []float32
}

func newTailCase(rng *rand.Rand, typ quant.Type, n int, perSlot bool) tailCase {
	c := tailCase{typ: typ, experts: 5, rows: 21, cols: testCols(typ), k: 3, n: n, perSlot: perSlot}
	c.w = randomMatrix(rng, typ, c.experts*c.rows, c.cols)
	xRows := n
	if perSlot {
		xRows = n * c.k
	}
	c.x = randomVector(rng, xRows*c.cols)
	c.ids = make([]float32, n*c.k)
	c.ws = make([]float32, n*c.k)
	for i := 0; i < n; i++ {
		p := rng.Perm(c.experts)
		for j := 0; j < c.k; j++ {
			c.ids[i*c.k+j] = float32(p[j])
			c.ws[i*c.k+j] = rng.Float32()
		}
	}
	return c
}

// TestMatMulExpertsSum checks the fused kernel against the two it replaces on the harness,
// bit for bit (same per-slot reduction, same order of the sum), and against the CPU
// backend's MatMulExperts and WeightedSum within matMulTol of Σ_j |w_j|·‖row‖·‖x_j‖.
func TestMatMulExpertsSum(t *testing.T) {
	dev := testDevice(t)
	rng := rand.New(rand.NewPCG(21, 1))
	for _, typ := range kernels.MatMulTypes {
		for _, n := range []int{1, 3, matVecMaxTokens} {
			for _, perSlot := range []bool{true, false} {
				if !perSlot && n != 3 {
					continue
				}
				tc := newTailCase(rng, typ, n, perSlot)
				t.Run(fmt.Sprintf("%v/n=%d/perSlot=%v", typ, n, perSlot), func(t *testing.T) {
					if n == 3 && perSlot {
						tc.ids[1] = float32(tc.experts) // an id outside: the token's sums are NaN in both
					}
					wr, x, ids, ws := upload(t, dev, tc.w), uploadF32(t, dev, tc.x), uploadF32(t, dev, tc.ids), uploadF32(t, dev, tc.ws)
					prod := upload(t, dev, make([]byte, 4*n*tc.k*tc.rows))
					two := upload(t, dev, make([]byte, 4*n*tc.rows))
					one := upload(t, dev, make([]byte, 4*n*tc.rows))
					run(t, dev, func(e *encoder) {
						e.matMulExperts(typ, wr, tc.experts, tc.rows, tc.cols, x, perSlot, ids, tc.k, prod, n, allPairs(n, tc.k))
						e.weightedSum(prod, ws, two, n, tc.k, tc.rows)
					})
					run(t, dev, func(e *encoder) {
						e.matMulExpertsSum(typ, wr, tc.experts, tc.rows, tc.cols, x, perSlot, ids, tc.k, ws, one, n, allPairs(n, tc.k))
					})
					want, got := readF32(t, two), readF32(t, one)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(isNaN32(got[i]) && isNaN32(want[i])) {
							t.Fatalf("[%d][%d] fused %g (%#x), two dispatches %g (%#x)", i/tc.rows, i%tc.rows, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
						}
					}
					if n == 3 && perSlot {
						for r := 0; r < tc.rows; r++ {
							if !isNaN32(got[r]) || isNaN32(got[tc.rows+r]) {
								t.Fatalf("row %d: token 0 (an id outside) %g, token 1 %g", r, got[r], got[tc.rows+r])
							}
						}
						return
					}
					tc.checkCPU(t, got)
				})
			}
		}
	}
}

func isNaN32(f float32) bool { return f != f }

// checkCPU compares sums with the CPU backend's two operations.
func (tc tailCase) checkCPU(t *testing.T, got []float32) {
	t.Helper()
	want := cpuPass(t, tc.typ, tc.w, []int{tc.cols, tc.rows, tc.experts}, func(c ml.Context, w ml.Weight) ml.Tensor {
		var x ml.Tensor
		if tc.perSlot {
			x = c.Input(tc.x, tc.n, tc.k, tc.cols)
		} else {
			x = c.Input(tc.x, tc.n, tc.cols)
		}
		y := c.MatMulExperts(w, x, c.Input(tc.ids, tc.n, tc.k))
		return c.WeightedSum(y, c.Input(tc.ws, tc.n, tc.k))
	})
	wn := rowNorms(t, tc.typ, tc.w, tc.experts*tc.rows, tc.cols)
	for i := 0; i < tc.n; i++ {
		for r := 0; r < tc.rows; r++ {
			scale := 0.0
			for j := 0; j < tc.k; j++ {
				p := i*tc.k + j
				xi := i
				if tc.perSlot {
					xi = p
				}
				scale += math.Abs(float64(tc.ws[p])) * wn[int(tc.ids[p])*tc.rows+r] * norm(tc.x[xi*tc.cols:(xi+1)*tc.cols])
			}
			g, w := got[i*tc.rows+r], want[i*tc.rows+r]
			if e := math.Abs(float64(g)-float64(w)) / scale; !(e <= matMulTol) {
				t.Fatalf("[%d][%d] = %g, CPU %g (error %.3g of Σ|w|‖row‖‖x‖)", i, r, g, w, e)
			}
		}
	}
}

// runTail runs MatMulExperts and WeightedSum as a graph on a backend over the harness with
// the fusion on or off; extra may add operations over the products and the sums. It returns
// the sums and the names of the operations that encoded something.
func runTail(t *testing.T, tc tailCase, fused bool, extra func(c ml.Context, y, s ml.Tensor) ml.Tensor) ([]float32, []string) {
	t.Helper()
	b := New(testDevice(t))
	b.FusedTail = fused
	data := pageAligned(len(tc.w))
	copy(data, tc.w)
	m, err := b.Map(data)
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Weight(m, "ffn_down_exps", tc.typ, []int{tc.cols, tc.rows, tc.experts}, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := b.NewContext()
	defer c.Close()
	x := c.Input(tc.x, tc.n, tc.k, tc.cols)
	y := c.MatMulExperts(w, x, c.Input(tc.ids, tc.n, tc.k))
	s := c.WeightedSum(y, c.Input(tc.ws, tc.n, tc.k))
	if extra != nil {
		s = extra(c, y, s)
	}
	if err := c.Compute(); err != nil {
		t.Fatal(err)
	}
	out, err := c.Read(s)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range c.(*context).ops {
		if o.encode != nil {
			names = append(names, o.name)
		}
	}
	return out, names
}

// TestFusedTailContext checks where the backend fuses: a sum of products nothing else
// reads becomes one operation with the same bits; products another operation reads, or a
// prefill batch, stay two.
func TestFusedTailContext(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 1))
	tc := newTailCase(rng, quant.Q4_K, 2, true)
	off, offOps := runTail(t, tc, false, nil)
	on, onOps := runTail(t, tc, true, nil)
	if strings.Join(offOps, ",") != "matmul experts,weighted sum" || strings.Join(onOps, ",") != "matmul experts+sum" {
		t.Fatalf("operations off %q, on %q", offOps, onOps)
	}
	for i := range off {
		if math.Float32bits(on[i]) != math.Float32bits(off[i]) {
			t.Fatalf("sum %d: fused %g, two dispatches %g", i, on[i], off[i])
		}
	}
	// The products are read again (a sum with themselves): they must exist, so no fusion.
	both := func(c ml.Context, y, s ml.Tensor) ml.Tensor {
		return c.Add(s, c.WeightedSum(y, c.Input(tc.ws, tc.n, tc.k)))
	}
	got, ops := runTail(t, tc, true, both)
	want, _ := runTail(t, tc, false, both)
	if strings.Contains(strings.Join(ops, ","), "+sum") {
		t.Errorf("fused products that a second operation reads: %q", ops)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sum %d: %g, want %g", i, got[i], want[i])
		}
	}
	// Prefill-sized batches keep the gathered mat-mat and the sum.
	big := newTailCase(rng, quant.Q8_0, matVecMaxTokens+1, true)
	if _, ops := runTail(t, big, true, nil); strings.Join(ops, ",") != "matmul experts,weighted sum" {
		t.Errorf("%d tokens: operations %q", big.n, ops)
	}
}

// decodeCounts counts the dispatches of one decode step of a model file on a recording
// device, with the fused tail on or off.
func decodeCounts(t *testing.T, path string, fused bool) []device.Count {
	t.Helper()
	rec := device.NewRecorder(kernels.Source())
	b := New(rec)
	b.FusedTail = fused
	m, err := engine.Load(path, engine.Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := m.NewSession(engine.SessionOptions{Context: 16, KV: ml.F16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := stdcontext.Background()
	if _, err := s.Prefill(ctx, []int32{1, 2, 3}, engine.PrefillOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.Reset()
	if _, err := s.Decode(ctx, 4); err != nil {
		t.Fatal(err)
	}
	return rec.Counts()
}

// TestFusedTailDecodeStep counts a decode step of tiny-qwen3next (4 layers, each with
// routed experts) on the recording device: the fusion issues one dispatch fewer per MoE
// layer, one fused dispatch per layer in place of the routed sum, and the shared expert's
// sum (over a view) stays.
func TestFusedTailDecodeStep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if _, err := synth.WriteFile(stdcontext.Background(), path, "tiny-qwen3next", synth.Options{Type: synth.IQ2_XXS, Layout: true}); err != nil {
		t.Fatal(err)
	}
	const layers = 4
	by := func(cs []device.Count) (total int, labels map[string]int) {
		labels = map[string]int{}
		for _, c := range cs {
			total += c.Dispatches
			labels[c.Label] += c.Dispatches
		}
		return total, labels
	}
	offTotal, off := by(decodeCounts(t, path, false))
	onTotal, on := by(decodeCounts(t, path, true))
	if onTotal != offTotal-layers {
		t.Errorf("a decode step issues %d dispatches fused, %d unfused; want %d fewer", onTotal, offTotal, layers)
	}
	if on["moe sum"] != off["moe sum"]-layers || on["moe sum"] != layers {
		t.Errorf("moe sum dispatches: %d fused, %d unfused", on["moe sum"], off["moe sum"])
	}
	fusedN := 0
	for l, n := range on {
		if strings.HasPrefix(l, "matvec experts+sum ") {
			fusedN += n
		}
	}
	if fusedN != layers {
		t.Errorf("%d fused dispatches, want %d: %v", fusedN, layers, on)
	}
}

// TestFusedTailModel runs the IQ2_XXS fixture of tiny-qwen3next token by token (every pass a
// decode-sized one, so every MoE layer fuses) with the fusion on and off: the logits at every
// position are the same bits.
func TestFusedTailModel(t *testing.T) {
	path := fixtures.Path(t, "models", "tiny-qwen3next-IQ2_XXS.gguf")
	logits := func(fused bool) []float32 {
		b := New(testDevice(t))
		b.FusedTail = fused
		m, err := engine.Load(path, engine.Options{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		return prefill(t, m, []int32{5, 77, 300, 12, 41, 9}, ml.F16, 1)
	}
	off, on := logits(false), logits(true)
	if len(on) != len(off) || len(on) == 0 {
		t.Fatalf("%d logits fused, %d unfused", len(on), len(off))
	}
	for i := range off {
		if math.Float32bits(on[i]) != math.Float32bits(off[i]) {
			t.Fatalf("logit %d (position %d): fused %g, unfused %g", i, i/(len(on)/6), on[i], off[i])
		}
	}
}
