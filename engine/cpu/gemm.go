package cpu

import (
	"fmt"

	"github.com/redlite/batch/engine/quant"
)

// Matrix products of many tokens run as a blocked GEMM: weight rows are expanded to float32
// a block at a time, the activations are packed k-major in panels of nr tokens, and a
// micro-kernel keeps an mr×nr tile of the result in registers for the whole k loop. Every
// output is still one float32 dot product of a dequantized row with a token, summed in k
// order.

// gemmKernel computes one tile C = A·B: mr rows of A (row-major, stride lda) times k rows
// of B of nr contiguous floats each (stride ldb), into mr rows of nr floats of C (stride
// ldc). C is overwritten. fnT, when set, stores the first m rows and n columns of C
// transposed instead: C[i][j] at c[j·ldc+i]; narrowT, when set, is fnT for panels of nr/2
// columns.
type gemmKernel struct {
	name    string
	mr, nr  int
	fn      func(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int)
	fnT     func(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, m, n int)
	narrowT func(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, m, n int)
}

// storeT runs fnT, or fn into tile followed by a scatter when the kernel has no fnT.
func (kern *gemmKernel) storeT(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, m, n int, tile []float32) {
	if kern.fnT != nil {
		kern.fnT(k, a, lda, b, ldb, c, ldc, m, n)
		return
	}
	nr := kern.nr
	kern.fn(k, a, lda, b, ldb, tile, nr)
	for i := 0; i < m; i++ {
		o := c[i:]
		for j, v := range tile[i*nr : i*nr+n] {
			o[j*ldc] = v
		}
	}
}

// goKernel is the portable kernel: a 4×4 tile in sixteen local variables, which the
// compiler keeps in registers, so that each loaded value feeds four multiply-adds (arm64
// fuses them into FMADD).
var goKernel = gemmKernel{name: "go", mr: 4, nr: 4, fn: gemm4x4Go}

// gemmKernels lists every kernel this CPU can run, best first.
var gemmKernels = append(asmKernels[:len(asmKernels):len(asmKernels)], goKernel)

// defaultKernel is the one the backend uses.
var defaultKernel = gemmKernels[0]

func gemm4x4Go(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	checkTile(4, 4, k, a, lda, b, ldb, c, ldc)
	a0 := a[:k]
	a1, a2, a3 := a[lda:lda+len(a0)], a[2*lda:2*lda+len(a0)], a[3*lda:3*lda+len(a0)]
	var c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33 float32
	for kk, x0 := range a0 {
		bb := b[kk*ldb:]
		bb = bb[:4:4]
		b0, b1, b2, b3 := bb[0], bb[1], bb[2], bb[3]
		x1, x2, x3 := a1[kk], a2[kk], a3[kk]
		c00 += x0 * b0
		c01 += x0 * b1
		c02 += x0 * b2
		c03 += x0 * b3
		c10 += x1 * b0
		c11 += x1 * b1
		c12 += x1 * b2
		c13 += x1 * b3
		c20 += x2 * b0
		c21 += x2 * b1
		c22 += x2 * b2
		c23 += x2 * b3
		c30 += x3 * b0
		c31 += x3 * b1
		c32 += x3 * b2
		c33 += x3 * b3
	}
	copy(c[0:4], []float32{c00, c01, c02, c03})
	copy(c[ldc:ldc+4], []float32{c10, c11, c12, c13})
	copy(c[2*ldc:2*ldc+4], []float32{c20, c21, c22, c23})
	copy(c[3*ldc:3*ldc+4], []float32{c30, c31, c32, c33})
}

// checkTile panics unless every element a kernel touches lies inside its slices: the
// assembly kernels read through raw pointers.
func checkTile(mr, nr, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	checkAB(mr, nr, k, a, lda, b, ldb)
	if ldc < nr || len(c) < (mr-1)*ldc+nr {
		panic(fmt.Sprintf("cpu: gemm tile %d×%d stored with ldc %d in %d floats", mr, nr, ldc, len(c)))
	}
}

func checkTileT(mr, nr, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, m, n int) {
	checkAB(mr, nr, k, a, lda, b, ldb)
	if m < 1 || m > mr || n < 1 || n > nr || ldc < m || len(c) < (n-1)*ldc+m {
		panic(fmt.Sprintf("cpu: gemm tile %d×%d stored transposed as %d×%d with ldc %d in %d floats", mr, nr, m, n, ldc, len(c)))
	}
}

func checkAB(mr, nr, k int, a []float32, lda int, b []float32, ldb int) {
	if k < 1 || lda < k || ldb < nr || len(a) < (mr-1)*lda+k || len(b) < (k-1)*ldb+nr {
		panic(fmt.Sprintf("cpu: gemm tile %d×%d over k=%d with lda %d (len %d), ldb %d (len %d)",
			mr, nr, k, lda, len(a), ldb, len(b)))
	}
}

// packPanels writes x [n, k] k-major in panels of nr tokens: panel p holds x[p·nr+j][kk] at
// kk·nr+j, zero for tokens past n. When last is less than nr, the last panel is last tokens
// wide instead (at the same offset). Whole 16×16 blocks are transposed in registers.
func packPanels(p *pool, dst, x []float32, n, k, nr, last int) {
	panels := (n + nr - 1) / nr
	p.parallel(panels, 1, func(lo, hi int) {
		for pn := lo; pn < hi; pn++ {
			w := nr
			if pn == panels-1 {
				w = last
			}
			panel := dst[pn*nr*k : pn*nr*k+w*k]
			t0 := pn * nr
			tn := min(w, n-t0)
			if tn < w {
				clear(panel)
			}
			j0, k0 := 0, 0 // tokens and features done in 16×16 blocks
			if w%16 == 0 {
				for ; j0+16 <= tn; j0 += 16 {
					for k0 = 0; k0+16 <= k; k0 += 16 {
						if !transpose16(x[(t0+j0)*k+k0:], k, panel[k0*w+j0:], w) {
							break
						}
					}
					if k0 != k&^15 {
						k0 = 0
						break
					}
				}
			}
			for j := 0; j < tn; j++ {
				kk := 0
				if j < j0 {
					kk = k0 // the blocks covered this token's first k0 features
				}
				for ; kk < k; kk++ {
					panel[kk*w+j] = x[(t0+j)*k+kk]
				}
			}
		}
	})
}

// gemmBlockBytes is the float32 size of the weight rows expanded at a time: they are read
// once per panel of tokens and should stay in the core's L2 cache next to that panel.
const gemmBlockBytes = 192 << 10

// gemmWeight computes out[t][r−r0] = row r of w · x[t] for rows [r0, r1) of w and n tokens
// of x [n, w.cols]; out is [n, r1−r0].
func gemmWeight(p *pool, kern gemmKernel, w *weight, r0, r1 int, x []float32, n int, out []float32) {
	mr, nr, k := kern.mr, kern.nr, w.cols
	rows := r1 - r0
	panels := (n + nr - 1) / nr
	// The last panel is packed half wide when it holds at most nr/2 tokens and the kernel
	// has a narrow variant.
	last := nr
	if tail := n - (panels-1)*nr; kern.narrowT != nil && 2*tail <= nr {
		last = nr / 2
	}
	xp := p.scratch.get(panels * nr * k)
	defer p.scratch.put(xp)
	packPanels(p, xp, x, n, k, nr, last)

	mb := max(1, gemmBlockBytes/4/k/mr) * mr // rows per block, a multiple of mr
	blocks := (rows + mb - 1) / mb
	p.parallel(blocks, 1, func(lo, hi int) {
		buf := p.scratch.get(mb * k)
		defer p.scratch.put(buf)
		tile := make([]float32, mr*nr)
		for blk := lo; blk < hi; blk++ {
			ra := blk * mb
			m := min(mb, rows-ra)
			mpad := (m + mr - 1) / mr * mr
			var a []float32
			if w.f32 != nil && r0+ra+mpad <= w.rows {
				a = w.f32[(r0+ra)*k : (r0+ra+mpad)*k]
			} else {
				a = buf[:mpad*k]
				for r := 0; r < m; r++ {
					dst := a[r*k : (r+1)*k]
					if w.f32 != nil {
						copy(dst, w.f32[(r0+ra+r)*k:])
					} else if err := quant.Dequantize(w.typ, w.row(r0+ra+r), dst); err != nil {
						panic(err)
					}
				}
				clear(a[m*k:])
			}
			for pn := 0; pn < panels; pn++ {
				t0 := pn * nr
				tn := min(nr, n-t0)
				if pn == panels-1 && last < nr {
					bp := xp[pn*nr*k : pn*nr*k+last*k]
					for i := 0; i < m; i += mr {
						kern.narrowT(k, a[i*k:], k, bp, last, out[t0*rows+ra+i:], rows, min(mr, m-i), tn)
					}
					continue
				}
				bp := xp[pn*nr*k : (pn+1)*nr*k]
				for i := 0; i < m; i += mr {
					kern.storeT(k, a[i*k:], k, bp, nr, out[t0*rows+ra+i:], rows, min(mr, m-i), tn, tile)
				}
			}
		}
	})
}
