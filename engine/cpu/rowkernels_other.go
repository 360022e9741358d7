//go:build !amd64 || purego

package cpu

func softmax32(x []float32, scale float32) { softmaxGo(x, scale) }
func swiglu(out, g, u []float32)           { swigluGo(out, g, u) }

func scoresStrided(a []float32, lda int, x []float32, out []float32) {
	scoresStridedGo(a, lda, x, out)
}

func weightedRows(w []float32, a []float32, lda int, out []float32) { weightedRowsGo(w, a, lda, out) }

func scoresStridedF16(a []uint16, lda int, x []float32, out []float32) {
	scoresStridedF16Go(a, lda, x, out)
}

func weightedRowsF16(w []float32, a []uint16, lda int, out []float32) {
	weightedRowsF16Go(w, a, lda, out)
}

func sumSquares(x []float32) float64                      { return sumSquaresGo(x) }
func scaleRow(dst, src []float32, s float32, w []float32) { scaleRowGo(dst, src, s, w) }

func siluRow(out, x []float32) { siluRowGo(out, x) }
