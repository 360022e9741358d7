package planner

import (
	"errors"
	"fmt"
	"math"
)

// Measurement is what the engine reported allocating for one configuration of one model
// (engine.Model.MeasureAllocation): the data a calibration is fitted to.
type Measurement struct {
	Context int       `json:"context"`
	Chunk   int       `json:"chunk"`
	KV      Precision `json:"kv"`
	// AllocatedBytes is the engine's total: weights, KV, recurrent state and chunk scratch.
	AllocatedBytes int64 `json:"allocated_bytes"`
}

// ErrBadMeasurements is wrapped by FitCalibration's errors about its input.
var ErrBadMeasurements = errors.New("planner: bad measurements")

// FitCalibration fits the two backend constants of c, BaseMiB and ScratchMiBPerChunkToken,
// to measurements of the model p describes, and returns c with them set and Status
// "measured". The fit covers every measurement — the planner never predicts less than the
// engine allocated — and is otherwise as tight as the data allow: the base is the largest
// excess of a MinChunk measurement over the weights and KV cache the profile predicts, the
// per-token scratch the largest further excess per chunk token above MinChunk. It needs at
// least one measurement at MinChunk and one at a larger chunk.
func FitCalibration(c Calibration, p Profile, ms []Measurement) (Calibration, error) {
	bad := func(format string, args ...any) (Calibration, error) {
		return Calibration{}, fmt.Errorf("%w: %s", ErrBadMeasurements, fmt.Sprintf(format, args...))
	}
	// Price each configuration with zero constants: what remains of the measurement is base
	// and scratch.
	zero := c
	zero.BaseMiB, zero.ScratchMiBPerChunkToken, zero.Status = 0, 0, StatusMeasured
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
	base, atMin := 0.0, false
	for i, m := range ms {
		if m.Chunk == c.MinChunk {
			base, atMin = math.Max(base, excess[i]), true
		}
	}
	if !atMin {
		return bad("none at the smallest chunk %d", c.MinChunk)
	}
	slope, above := 0.0, false
	for i, m := range ms {
		if m.Chunk > c.MinChunk {
			slope, above = math.Max(slope, (excess[i]-base)/float64(m.Chunk-c.MinChunk)), true
		}
	}
	if !above {
		return bad("none above the smallest chunk %d", c.MinChunk)
	}
	out := c
	out.BaseMiB = base / MiB
	out.ScratchMiBPerChunkToken = slope / MiB
	out.Status = StatusMeasured
	return out, out.Validate()
}
