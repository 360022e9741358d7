package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ulps is the distance between two float32 values in units in the last place.
func ulps(a, b float32) float64 {
	if a == b {
		return 0
	}
	return math.Abs(float64(a)-float64(b)) / float64(math.Nextafter32(float32(math.Abs(float64(b))), float32(math.Inf(1)))-float32(math.Abs(float64(b))))
}

func TestSoftmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 5, 16, 17, 40, 513} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 30)
		}
		x[0] = -2000 // underflows to 0
		want := append([]float32(nil), x...)
		softmaxGo(want, 0.125)
		softmax32(x, 0.125)
		for i := range x {
			if u := ulps(x[i], want[i]); u > 3 || (want[i] == 0) != (x[i] == 0) {
				t.Fatalf("n=%d: element %d = %v, want %v (%g ulp)", n, i, x[i], want[i], u)
			}
		}
	}
}

func TestSwiGLU(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{1, 15, 16, 33, 3072} {
		g, u := make([]float32, n), make([]float32, n)
		for i := range g {
			g[i] = float32(rng.NormFloat64() * 8)
			u[i] = float32(rng.NormFloat64())
		}
		g[0] = 200 // e^−g underflows: silu is g
		if n > 1 {
			g[1] = -200 // e^−g overflows: silu is −0
		}
		got, want := make([]float32, n), make([]float32, n)
		swiglu(got, g, u)
		swigluGo(want, g, u)
		for i := range got {
			if ulps(got[i], want[i]) > 4 {
				t.Fatalf("n=%d: silu(%v)·%v = %v, want %v", n, g[i], u[i], got[i], want[i])
			}
		}
	}
}

func TestStridedKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, rows := range []int{1, 2, 7, 130} {
		const n, lda = 128, 1024
		a := randomTensor(rng, (rows-1)*lda+n).data
		x := randomTensor(rng, n).data
		got, want := make([]float32, rows), make([]float32, rows)
		scoresStrided(a, lda, x, got)
		scoresStridedGo(a, lda, x, want)
		for r := range got {
			if math.Abs(float64(got[r]-want[r])) > 1e-4*(1+math.Abs(float64(want[r]))) {
				t.Fatalf("rows %d: score %d = %v, want %v", rows, r, got[r], want[r])
			}
		}
		w := randomTensor(rng, rows).data
		o1, o2 := make([]float32, n), make([]float32, n)
		weightedRows(w, a, lda, o1)
		weightedRowsGo(w, a, lda, o2)
		for i := range o1 {
			if math.Abs(float64(o1[i]-o2[i])) > 1e-4*(1+math.Abs(float64(o2[i]))) {
				t.Fatalf("rows %d: output %d = %v, want %v", rows, i, o1[i], o2[i])
			}
		}
	}
}
