//go:build darwin

package mtl

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
)

// MPS on the real GPU against our tiled kernel (mul_mm_*), in the shape the backend uses it
// (metalkit's matMulMPS): a half-precision weight decoded to float32 rows by get_rows into
// scratch, then MPSMatrixMultiplication in chunks of output features written into their
// columns of the output, between compute dispatches of the same command list — so the
// compute encoder is ended and reopened around each product, and the products must see
// the decoding's writes. The Linux test (metalkit's TestMatMulMPSRoute) checks the same
// shapes and strides against a host GEMM; this one checks that MPS reads them as we do.

// kernelDevice is the GPU with our kernels' library.
func kernelDevice(t testing.TB) *Device {
	t.Helper()
	return openDevice(t, kernels.Source())
}

func argBytes(t testing.TB, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func newBuf(t testing.TB, d *Device, data []byte) device.Buffer {
	t.Helper()
	b, err := d.NewBuffer(int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Release)
	if err := b.Write(0, data); err != nil {
		t.Fatal(err)
	}
	return b
}

func pipe(t testing.TB, d *Device, name string) device.Pipeline {
	t.Helper()
	p, err := d.Pipeline(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tiled encodes y[n, rows] = x[n, cols] · wᵀ with mul_mm_<sfx>_f32, as metalkit's matMul does.
func tiled(t testing.TB, d *Device, cmd device.Commands, sfx string, w, x, y device.Buffer, rows, cols, n int, rb int64) {
	cmd.Encode(device.Dispatch{
		Pipeline: pipe(t, d, "mul_mm_"+sfx+"_f32"),
		Groups:   [3]int{(rows + kernels.MmRows - 1) / kernels.MmRows, (n + kernels.MmTokens - 1) / kernels.MmTokens, 1},
		Threads:  [3]int{kernels.MmThreads, 1, 1},
		Bytes:    []device.BytesArg{{Index: 0, Data: argBytes(t, kernels.MulMmArgs{Rows: int32(rows), Cols: int32(cols), N: int32(n), RowBytes: uint64(rb)})}},
		Buffers:  []device.BufferArg{{Index: 1, Buffer: w}, {Index: 2, Buffer: x}, {Index: 3, Buffer: y}},
	})
}

func TestMPSGEMM(t *testing.T) {
	d := kernelDevice(t)
	rng := rand.New(rand.NewPCG(11, 1))
	const rows, cols, n, chunk = 70, 544, 67, 32
	const xOff = 256 // the activations not at the start of their buffer, as in a pass's scratch
	rb := int64(quant.F16.RowBytes(cols))
	wv := make([]byte, rows*int(rb))
	for i := 0; i < rows*cols; i++ {
		binary.LittleEndian.PutUint16(wv[2*i:], quant.F32ToF16(float32(rng.NormFloat64())))
	}
	xv := make([]float32, n*cols)
	for i := range xv {
		xv[i] = float32(rng.NormFloat64())
	}
	ids := make([]float32, chunk)
	for i := range ids {
		ids[i] = float32(i)
	}
	w := newBuf(t, d, wv)
	x := newBuf(t, d, append(make([]byte, xOff), floatBytes(xv)...))
	xt := newBuf(t, d, floatBytes(xv))
	idb := newBuf(t, d, floatBytes(ids))
	deq := newBuf(t, d, make([]byte, chunk*cols*4))
	yMPS := newBuf(t, d, make([]byte, n*rows*4))
	yTiled := newBuf(t, d, make([]byte, n*rows*4))

	cmd := d.NewCommands()
	tiled(t, d, cmd, "f16", w, xt, yTiled, rows, cols, n, rb)
	for r0 := 0; r0 < rows; r0 += chunk {
		rc := min(chunk, rows-r0)
		cmd.Encode(device.Dispatch{
			Pipeline: pipe(t, d, "get_rows_f16"),
			Groups:   [3]int{(cols/16 + kernels.GetRowsThreads - 1) / kernels.GetRowsThreads, rc, 1},
			Threads:  [3]int{kernels.GetRowsThreads, 1, 1},
			Bytes:    []device.BytesArg{{Index: 0, Data: argBytes(t, kernels.GetRowsArgs{Cols: cols, N: int32(rc), Rows: int32(rc), RowBytes: uint64(rb)})}},
			Buffers:  []device.BufferArg{{Index: 1, Buffer: w, Offset: int64(r0) * rb}, {Index: 2, Buffer: idb}, {Index: 3, Buffer: deq}},
		})
		d.EncodeGEMM(cmd, device.GEMM{
			M: n, N: rc, K: cols,
			A: device.Matrix{Buffer: x, Offset: xOff, RowBytes: 4 * cols},
			B: device.Matrix{Buffer: deq, RowBytes: 4 * cols},
			C: device.Matrix{Buffer: yMPS, Offset: 4 * int64(r0), RowBytes: 4 * rows},
		})
	}
	cmd.Commit()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	got, want := make([]byte, n*rows*4), make([]byte, n*rows*4)
	if err := yMPS.Read(0, got); err != nil {
		t.Fatal(err)
	}
	if err := yTiled.Read(0, want); err != nil {
		t.Fatal(err)
	}
	// Both sum float32 products of the same decoded weights in another order; relative to
	// ‖w_row‖·‖x‖ the difference is ~1e-7, a wrong stride or offset gives ~1.
	g, wnt := floats(got), floats(want)
	worst := 0.0
	for i := 0; i < n; i++ {
		xn := 0.0
		for _, v := range xv[i*cols : (i+1)*cols] {
			xn += float64(v) * float64(v)
		}
		for r := 0; r < rows; r++ {
			wn := 0.0
			for k := 0; k < cols; k++ {
				f := float64(quant.F16ToF32(binary.LittleEndian.Uint16(wv[int64(r)*rb+2*int64(k):])))
				wn += f * f
			}
			e := math.Abs(float64(g[i*rows+r]-wnt[i*rows+r])) / math.Sqrt(wn*xn)
			if !(e <= 1e-4) {
				t.Fatalf("y[%d][%d]: MPS %g, tiled kernel %g", i, r, g[i*rows+r], wnt[i*rows+r])
			}
			worst = max(worst, e)
		}
	}
	t.Logf("max difference %.2g of ‖w‖‖x‖", worst)

	// A product the device cannot run fails the pass at Wait, naming it.
	cmd = d.NewCommands()
	d.EncodeGEMM(cmd, device.GEMM{M: n, N: rows, K: cols,
		A: device.Matrix{Buffer: x, RowBytes: 4 * cols},
		B: device.Matrix{Buffer: deq, RowBytes: 4 * cols}, // chunk rows, not rows: past the buffer
		C: device.Matrix{Buffer: yMPS, RowBytes: 4 * rows},
	})
	cmd.Commit()
	if err := cmd.Wait(); err == nil {
		t.Error("a GEMM past its buffer ran")
	}
}

// BenchmarkGEMM compares MPS with the tiled kernel on the dense prefill projections Red
// Lite measured (2048 tokens; float32 weights, so both read the same bytes):
// go test -run '^$' -bench GEMM ./metalkit/mtl/ (scripts/mac-check runs it).
func BenchmarkGEMM(b *testing.B) {
	d := kernelDevice(b)
	for _, s := range []struct{ rows, cols int }{{4096, 2048}, {2048, 4096}, {8192, 2048}} {
		const n = 2048
		w := newBuf(b, d, make([]byte, s.rows*s.cols*4))
		x := newBuf(b, d, make([]byte, n*s.cols*4))
		y := newBuf(b, d, make([]byte, n*s.rows*4))
		flops := 2 * float64(n) * float64(s.rows) * float64(s.cols)
		for _, mps := range []bool{false, true} {
			name := fmt.Sprintf("%dx%d/n=%d/tiled", s.rows, s.cols, n)
			if mps {
				name = name[:len(name)-len("tiled")] + "mps"
			}
			b.Run(name, func(b *testing.B) {
				for range b.N {
					cmd := d.NewCommands()
					if mps {
						d.EncodeGEMM(cmd, device.GEMM{M: n, N: s.rows, K: s.cols,
							A: device.Matrix{Buffer: x, RowBytes: 4 * int64(s.cols)},
							B: device.Matrix{Buffer: w, RowBytes: 4 * int64(s.cols)},
							C: device.Matrix{Buffer: y, RowBytes: 4 * int64(s.rows)},
						})
					} else {
						tiled(b, d, cmd, "f32", w, x, y, s.rows, s.cols, n, 4*int64(s.cols))
					}
					cmd.Commit()
					if err := cmd.Wait(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOPS")
			})
		}
	}
}
