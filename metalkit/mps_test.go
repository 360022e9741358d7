package metalkit

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/metalkit/device"
)

// The MPS route of dense prefill products (matMulMPS) on Linux: MPS cannot run here, so a
// device wrapping the harness implements device.GEMMEncoder by computing each product on
// the host, in float64, from the buffers at the point of the command list where it was
// encoded. What it checks is what a Mac's MPS would be handed — shapes, strides, offsets,
// transposition, the order with the decoding dispatches — and that the route's results
// equal the tiled kernel's. scripts/mac-check runs the real MPS (mtl's TestMPSGEMM).

// gemmDevice is the harness device plus a host GEMM.
type gemmDevice struct {
	device.Device
	gemms []device.GEMM // every product encoded, in order
}

func (d *gemmDevice) NewCommands() device.Commands { return &gemmCommands{d: d} }

func (d *gemmDevice) EncodeGEMM(cmd device.Commands, g device.GEMM) {
	c := cmd.(*gemmCommands)
	d.gemms = append(d.gemms, g)
	c.steps = append(c.steps, gemmStep{gemm: &g})
}

// gemmCommands keeps the dispatches and products in order and runs them at Commit: runs of
// dispatches as harness command lists, each product on the host after the dispatches
// before it.
type gemmCommands struct {
	d     *gemmDevice
	steps []gemmStep
	err   error
}

type gemmStep struct {
	dispatch device.Dispatch
	gemm     *device.GEMM
}

func (c *gemmCommands) Encode(d device.Dispatch) { c.steps = append(c.steps, gemmStep{dispatch: d}) }

func (c *gemmCommands) Commit() {
	var cur device.Commands
	flush := func() {
		if cur != nil {
			cur.Commit()
			if err := cur.Wait(); err != nil && c.err == nil {
				c.err = err
			}
			cur = nil
		}
	}
	for _, s := range c.steps {
		if s.gemm == nil {
			if cur == nil {
				cur = c.d.Device.NewCommands()
			}
			cur.Encode(s.dispatch)
			continue
		}
		flush()
		if err := hostGEMM(*s.gemm); err != nil && c.err == nil {
			c.err = err
		}
	}
	flush()
}

func (c *gemmCommands) Wait() error { return c.err }

// hostGEMM computes C = A · Bᵀ from the buffers.
func hostGEMM(g device.GEMM) error {
	if err := g.Check(); err != nil {
		return err
	}
	row := func(m device.Matrix, i, cols int) ([]float64, error) {
		es := m.Type.Size()
		b := make([]byte, int64(cols)*es)
		if err := m.Buffer.Read(m.Offset+int64(i)*m.RowBytes, b); err != nil {
			return nil, err
		}
		v := make([]float64, cols)
		for j := range v {
			if m.Type == device.Float16 {
				v[j] = float64(quant.F16ToF32(binary.LittleEndian.Uint16(b[2*j:])))
			} else {
				v[j] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:])))
			}
		}
		return v, nil
	}
	bs := make([][]float64, g.N)
	for j := range bs {
		var err error
		if bs[j], err = row(g.B, j, g.K); err != nil {
			return err
		}
	}
	out := make([]byte, 4*g.N)
	for i := 0; i < g.M; i++ {
		a, err := row(g.A, i, g.K)
		if err != nil {
			return err
		}
		for j, b := range bs {
			s := 0.0
			for k := range a {
				s += a[k] * b[k]
			}
			binary.LittleEndian.PutUint32(out[4*j:], math.Float32bits(float32(s)))
		}
		if err := g.C.Buffer.Write(g.C.Offset+int64(i)*g.C.RowBytes, out); err != nil {
			return err
		}
	}
	return nil
}

// mpsProduct runs y = x · wᵀ through a backend over dev and returns y and the pass's peak
// scratch.
func mpsProduct(t *testing.T, dev device.Device, mps bool, typ quant.Type, w []byte, rows, cols int, x []float32, n int) ([]float32, int64) {
	t.Helper()
	b := New(dev)
	b.MPS = mps
	data := pageAligned(len(w))
	copy(data, w)
	m, err := b.Map(data)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := b.Weight(m, "w", typ, []int{cols, rows}, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := b.NewContext()
	defer c.Close()
	y := c.MatMul(wt, c.Input(x, n, cols))
	if err := c.Compute(); err != nil {
		t.Fatal(err)
	}
	out, err := c.Read(y)
	if err != nil {
		t.Fatal(err)
	}
	return out, b.PeakScratchBytes()
}

func TestMatMulMPSRoute(t *testing.T) {
	rng := rand.New(rand.NewPCG(40, 1))
	defer func(v int64) { mpsChunkBytes = v }(mpsChunkBytes)
	const rows = 70
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.F16, quant.F32} {
		cols := testCols(typ)
		// Chunks of 32 output features: 32, 32 and 6 (a short last chunk).
		mpsChunkBytes = 32 * 4 * int64(cols)
		w := randomMatrix(rng, typ, rows, cols)
		wn := rowNorms(t, typ, w, rows, cols)
		for _, n := range []int{mpsMinTokens - 1, mpsMinTokens + 3} {
			t.Run(fmt.Sprintf("%v/n=%d", typ, n), func(t *testing.T) {
				x := randomVector(rng, n*cols)
				dev := &gemmDevice{Device: testDevice(t)}
				got, peakMPS := mpsProduct(t, dev, true, typ, w, rows, cols, x, n)
				gemms := dev.gemms
				want, peakTiled := mpsProduct(t, dev, false, typ, w, rows, cols, x, n)
				if len(dev.gemms) != len(gemms) {
					t.Fatalf("with the switch off, %d products went through the GEMM", len(dev.gemms)-len(gemms))
				}
				route := routeMPS(dev, true, typ, rows, cols, n)
				if n < mpsMinTokens {
					if len(gemms) != 0 || route.chunk != 0 {
						t.Fatalf("%d tokens (below %d) took the GEMM route: %d products", n, mpsMinTokens, len(gemms))
					}
					return
				}
				checkGEMMs(t, gemms, typ, rows, cols, n, route)
				if extra := route.scratch(cols); peakMPS < peakTiled+extra {
					t.Errorf("peak scratch %d with MPS, %d without: the %d bytes of decoded weight are not planned", peakMPS, peakTiled, extra)
				}
				worst := compareProducts(t, "mps route", got, want,
					func(_, r int) float64 { return wn[r] },
					func(i int) float64 { return norm(x[i*cols : (i+1)*cols]) }, rows)
				t.Logf("%d products, max difference %.2g of ‖w‖‖x‖ from the tiled kernel", len(gemms), worst)
			})
		}
	}
}

// checkGEMMs checks the products the route encoded for y[n, rows] = x[n, cols] · wᵀ.
func checkGEMMs(t *testing.T, gemms []device.GEMM, typ quant.Type, rows, cols, n int, route mpsRoute) {
	t.Helper()
	want := ceilDiv(rows, route.chunk)
	if typ == quant.F32 {
		// Read in place: one product over the whole weight, whatever the chunk bound.
		want = 1
		if route.decode || route.chunk != rows {
			t.Errorf("an f32 weight routed as %+v, want in place", route)
		}
	}
	if len(gemms) != want {
		t.Fatalf("%d products, want %d", len(gemms), want)
	}
	rb := int64(typ.RowBytes(cols))
	c0 := gemms[0].C.Offset
	for i, g := range gemms {
		rc := min(route.chunk, rows-i*route.chunk)
		if g.M != n || g.N != rc || g.K != cols {
			t.Errorf("product %d is %d×%d by %d×%d, want %d×%d by %d×%d", i, g.M, g.K, g.N, g.K, n, cols, rc, cols)
		}
		if g.A.RowBytes != 4*int64(cols) || g.A.Type != device.Float32 {
			t.Errorf("product %d: activations with rows of %d bytes (%v), want %d (f32)", i, g.A.RowBytes, g.A.Type, 4*cols)
		}
		if g.C.RowBytes != 4*int64(rows) || g.C.Offset != c0+int64(4*i*route.chunk) {
			t.Errorf("product %d: output at +%d with rows of %d bytes, want +%d and %d", i, g.C.Offset-c0, g.C.RowBytes, 4*i*route.chunk, 4*rows)
		}
		if g.B.Type != device.Float32 {
			t.Errorf("product %d: weights as %v, want f32", i, g.B.Type)
		}
		if typ == quant.F32 {
			if g.B.RowBytes != rb {
				t.Errorf("in-place weight with rows of %d bytes, want %d", g.B.RowBytes, rb)
			}
			continue
		}
		if g.B.RowBytes != 4*int64(cols) {
			t.Errorf("product %d: decoded weight with rows of %d bytes, want %d", i, g.B.RowBytes, 4*cols)
		}
		// The decoded weight is scratch of its own: it overlaps neither operand.
		bEnd := g.B.Offset + int64(rc)*g.B.RowBytes
		for _, o := range []struct {
			name       string
			m          device.Matrix
			rows, cols int
		}{{"activations", g.A, n, cols}, {"output", g.C, n, rc}} {
			end := o.m.Offset + int64(o.rows-1)*o.m.RowBytes + 4*int64(o.cols)
			if o.m.Buffer == g.B.Buffer && g.B.Offset < end && o.m.Offset < bEnd {
				t.Errorf("product %d: decoded weight [%d, %d) overlaps the %s [%d, %d)", i, g.B.Offset, bEnd, o.name, o.m.Offset, end)
			}
		}
	}
}

// The harness device alone has no GEMM: every product takes the tiled kernel.
func TestMatMulMPSFallback(t *testing.T) {
	if r := routeMPS(testDevice(t), true, quant.Q8_0, 4096, 2048, 2048); r.chunk != 0 {
		t.Fatalf("the harness device routed a product through a GEMM: %+v", r)
	}
	dev := &gemmDevice{Device: testDevice(t)}
	if r := routeMPS(dev, true, quant.Q8_0, 4096, 2048, 2048); r.chunk == 0 || !r.decode || r.scratch(2048) > mpsChunkBytes {
		t.Fatalf("a 2048-token Q8_0 product on a device with a GEMM routed as %+v", r)
	}
}

// TestForwardParityMPS runs a whole prefill of 72 tokens (one chunk: every dense product
// takes the route) through the host-GEMM device, against the CPU backend's logits: a qwen3
// model always (about a second), and a qwen3next one — its DeltaNet projections — with
// REDLITE_TEST_PARITY=full (about 20 s on the harness). The bound is TestModelParity's.
func TestForwardParityMPS(t *testing.T) {
	tokens := make([]int32, mpsMinTokens+8)
	for i := range tokens {
		tokens[i] = int32((i*37 + 11) % 500)
	}
	for _, name := range []string{"tiny-qwen3-Q4_K_M", "tiny-qwen3next-IQ2_XXS"} {
		t.Run(name, func(t *testing.T) {
			if name != "tiny-qwen3-Q4_K_M" && os.Getenv("REDLITE_TEST_PARITY") != "full" {
				t.Skip("REDLITE_TEST_PARITY=full runs it")
			}
			path := fixtures.Path(t, "models", name+".gguf")
			// The CPU's exact dot path: the Metal kernels compute as it does.
			ref, err := engine.Load(path, engine.Options{Threads: 1, CPUDot: "exact"})
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			dev := &gemmDevice{Device: testDevice(t)}
			m, err := engine.Load(path, engine.Options{Backend: New(dev)})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			want := prefill(t, ref, tokens, ml.F32, 0)
			got := prefill(t, m, tokens, ml.F32, 0)
			if len(dev.gemms) == 0 {
				t.Fatal("no product went through the GEMM")
			}
			if d, at := logitsDiff(want, got); d > 2e-3 {
				t.Errorf("logits differ from the CPU's by %.3g at value %d", d, at)
			} else {
				t.Logf("%d products through the GEMM; logits within %.2g of the CPU's", len(dev.gemms), d)
			}
		})
	}
}
