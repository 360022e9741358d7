package planner

import (
	"errors"
	"fmt"
	"math"

	"github.com/redlite/batch/engine/ml"
)

// Measurement is what the engine reported allocating for one configuration of one model
// (engine.Model.MeasureAllocation): the data a calibration is fitted to.
type Measurement struct {
	Context int      `json:"context"`
	Chunk   int      `json:"chunk"`
	KV      ml.DType `json:"kv"`
	// AllocatedBytes is the engine's total: weights, KV, recurrent state and chunk scratch.
	AllocatedBytes int64 `json:"allocated_bytes"`
}

// ErrBadMeasurements is wrapped by FitCalibration's errors about its input.
var ErrBadMeasurements = errors.New("planner: bad measurements")

// FitCalibration fits the backend constants of c — BaseMiB, ScratchMiBPerChunkToken and the
// attention scratch per position of each precision — to measurements of the model p
// describes, and returns c with them set and Status "measured". Each measurement's excess
// over the weights and KV cache the profile predicts is fitted by least squares; the base is
// then raised so that the fit covers every measurement: the planner never predicts less
// than the engine allocated. It needs at least one measurement at MinChunk and one at a
// larger chunk; with one context per precision the per-position terms cannot be told from
// the base and come out 0.
func FitCalibration(c Calibration, p Profile, ms []Measurement) (Calibration, error) {
	bad := func(format string, args ...any) (Calibration, error) {
		return Calibration{}, fmt.Errorf("%w: %s", ErrBadMeasurements, fmt.Sprintf(format, args...))
	}
	// Price each configuration with zero constants: what remains of the measurement is base
	// and scratch.
	zero := c
	zero.BaseMiB, zero.ScratchMiBPerChunkToken, zero.Status = 0, 0, StatusMeasured
	zero.AttentionScratchBytesPerPositionF32, zero.AttentionScratchBytesPerPositionF16 = 0, 0
	excess := make([]float64, len(ms))
	for i, m := range ms {
		if m.Chunk > m.Context {
			return bad("measurement %d: chunk %d exceeds its context %d", i, m.Chunk, m.Context)
		}
		b, err := Estimate(Config{Context: m.Context, Slots: 1, KV: m.KV, Chunk: m.Chunk, Residency: ResidencyFull}, p, zero)
		if err != nil {
			return bad("measurement %d: %v", i, err)
		}
		excess[i] = float64(m.AllocatedBytes - b.TotalBytes)
	}
	// Least squares over excess = base + (chunk − MinChunk)·perToken + context·perPos[kv]
	// finds the slopes through the measurements' noise (the heap does not grow byte for
	// byte with the configuration); negative slopes are dropped to 0. The base is then
	// raised until every measurement is covered.
	atMin, above := false, false
	rows := make([][]float64, len(ms))
	for i, m := range ms {
		atMin = atMin || m.Chunk == c.MinChunk
		above = above || m.Chunk > c.MinChunk
		row := []float64{1, float64(m.Chunk - c.MinChunk), 0, 0}
		if m.KV == ml.F16 {
			row[3] = float64(m.Context)
		} else {
			row[2] = float64(m.Context)
		}
		rows[i] = row
	}
	if !atMin {
		return bad("none at the smallest chunk %d", c.MinChunk)
	}
	if !above {
		return bad("none above the smallest chunk %d", c.MinChunk)
	}
	coef := leastSquares(rows, excess)
	slope := math.Max(coef[1], 0)
	perPos := map[ml.DType]float64{ml.F32: math.Max(coef[2], 0), ml.F16: math.Max(coef[3], 0)}
	base := 0.0
	for i, m := range ms {
		rest := excess[i] - float64(m.Chunk-c.MinChunk)*slope - float64(m.Context)*perPos[m.KV]
		base = math.Max(base, rest)
	}
	out := c
	out.BaseMiB = base / MiB
	out.ScratchMiBPerChunkToken = slope / MiB
	out.AttentionScratchBytesPerPositionF32 = perPos[ml.F32]
	out.AttentionScratchBytesPerPositionF16 = perPos[ml.F16]
	out.Status = StatusMeasured
	return out, out.Validate()
}

// leastSquares solves min ‖A·x − y‖ through the normal equations, with Gaussian elimination
// and partial pivoting; columns that the data cannot determine get 0.
func leastSquares(a [][]float64, y []float64) []float64 {
	n := len(a[0])
	// Scale each column to unit size so that contexts in the thousands and the constant
	// column condition alike.
	scale := make([]float64, n)
	for _, row := range a {
		for j, v := range row {
			scale[j] = math.Max(scale[j], math.Abs(v))
		}
	}
	m := make([][]float64, n)
	for j := range m {
		m[j] = make([]float64, n+1)
	}
	for i, row := range a {
		for j := 0; j < n; j++ {
			if scale[j] == 0 {
				continue
			}
			for k := 0; k < n; k++ {
				if scale[k] != 0 {
					m[j][k] += row[j] / scale[j] * row[k] / scale[k]
				}
			}
			m[j][n] += row[j] / scale[j] * y[i]
		}
	}
	x := make([]float64, n)
	used := make([]bool, n)
	for col := 0; col < n; col++ {
		piv, best := -1, 1e-9
		for r := 0; r < n; r++ {
			if !used[r] && math.Abs(m[r][col]) > best {
				piv, best = r, math.Abs(m[r][col])
			}
		}
		if piv < 0 {
			continue // undetermined: the coefficient stays 0
		}
		used[piv] = true
		for r := 0; r < n; r++ {
			if r != piv && m[r][col] != 0 {
				f := m[r][col] / m[piv][col]
				for k := col; k <= n; k++ {
					m[r][k] -= f * m[piv][k]
				}
			}
		}
	}
	for r := 0; r < n; r++ {
		if !used[r] {
			continue
		}
		for col := 0; col < n; col++ {
			if m[r][col] != 0 {
				if scale[col] != 0 {
					x[col] = m[r][n] / m[r][col] / scale[col]
				}
				break
			}
		}
	}
	return x
}
