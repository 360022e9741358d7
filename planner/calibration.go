package planner

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/redlite/batch/engine/ml"
)

// Calibration holds the constants of the memory model that depend on the engine and the GPU
// rather than on the model file. They are data, not code: each set is measured for one
// backend (and, since scratch scales with the model's width, one model family) and kept as
// JSON.
type Calibration struct {
	Name    string `json:"name"`
	Backend string `json:"backend"` // "metal" or "cpu"
	// Model is the model the set was measured with.
	Model string `json:"model"`
	// Status is "published" (someone else's measurement), "measured" (ours) or "placeholder"
	// (not measured yet: do not trust plans made with it).
	Status string `json:"status"`
	Source string `json:"source,omitempty"`
	// BaseMiB is everything the backend allocates besides weights, KV, chunk scratch above
	// MinChunk and MTP: the device context, command buffers, the 512-token scratch, the first
	// sequence's recurrent state.
	BaseMiB float64 `json:"base_mib"`
	// ScratchMiBPerChunkToken is the prefill scratch each chunk token above MinChunk adds.
	ScratchMiBPerChunkToken float64 `json:"scratch_mib_per_chunk_token"`
	// AttentionScratchBytesPerPositionF32 and …F16 are transient attention memory per
	// context position for each KV precision: a backend that repacks the cache for a prefill
	// chunk's attention (the CPU backend packs every position's keys, and widens f16 values
	// to f32) needs it on top of the cache. Absent means 0: Metal reads the cache in place.
	// A q8_0 cache is widened as an f16 one is, so the F16 figure serves it.
	AttentionScratchBytesPerPositionF32 float64 `json:"attention_scratch_bytes_per_position_f32,omitempty"`
	AttentionScratchBytesPerPositionF16 float64 `json:"attention_scratch_bytes_per_position_f16,omitempty"`
	// MinChunk is the smallest prefill chunk; its scratch is part of BaseMiB.
	MinChunk int `json:"min_chunk"`
	// AlignmentBytes is the granularity of the backend's buffers; the KV and scratch terms
	// are rounded up to it.
	AlignmentBytes int64 `json:"alignment_bytes"`
	// MTPMaxContext is the longest context at which MTP still pays; 0 means no limit.
	MTPMaxContext int `json:"mtp_max_context"`
}

// Calibration status values.
const (
	StatusPublished   = "published"
	StatusMeasured    = "measured"
	StatusPlaceholder = "placeholder"
)

// KVs are the cache precisions the calibration's backend holds, best first: every
// backend holds all of them (the Metal kernels read q8_0 caches too).
func (c Calibration) KVs() []ml.DType {
	return KVPrecisions
}

// attentionScratch is the transient attention bytes per context position at precision p.
func (c Calibration) attentionScratch(p ml.DType) float64 {
	if p == ml.F16 || p == ml.Q8_0 {
		return c.AttentionScratchBytesPerPositionF16
	}
	return c.AttentionScratchBytesPerPositionF32
}

// Validate reports the first field that makes the calibration unusable.
func (c Calibration) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadCalibration, c.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case c.BaseMiB < 0 || c.BaseMiB != c.BaseMiB:
		return bad("base_mib must be ≥ 0, got %v", c.BaseMiB)
	case c.ScratchMiBPerChunkToken < 0 || c.ScratchMiBPerChunkToken != c.ScratchMiBPerChunkToken:
		return bad("scratch_mib_per_chunk_token must be ≥ 0, got %v", c.ScratchMiBPerChunkToken)
	case !(c.AttentionScratchBytesPerPositionF32 >= 0) || !(c.AttentionScratchBytesPerPositionF16 >= 0):
		return bad("attention scratch per position must be ≥ 0, got %v (f32) and %v (f16)", c.AttentionScratchBytesPerPositionF32, c.AttentionScratchBytesPerPositionF16)
	case c.MinChunk <= 0 || c.MinChunk > LargestChunk:
		return bad("min_chunk must be within [1, %d], got %d", LargestChunk, c.MinChunk)
	case c.AlignmentBytes <= 0 || c.AlignmentBytes&(c.AlignmentBytes-1) != 0:
		return bad("alignment_bytes must be a power of two, got %d", c.AlignmentBytes)
	case c.MTPMaxContext < 0:
		return bad("mtp_max_context must be ≥ 0 (0 = no limit), got %d", c.MTPMaxContext)
	}
	switch c.Status {
	case StatusPublished, StatusMeasured, StatusPlaceholder:
	default:
		return bad("status %q: want %s, %s or %s", c.Status, StatusPublished, StatusMeasured, StatusPlaceholder)
	}
	return nil
}

// ReadCalibration decodes and validates one calibration in JSON; unknown fields are errors so
// that a misspelt constant is not silently zero.
func ReadCalibration(r io.Reader) (Calibration, error) {
	var c Calibration
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Calibration{}, fmt.Errorf("%w: %w", ErrBadCalibration, err)
	}
	return c, c.Validate()
}

// ReadProfile decodes and validates one profile in JSON.
func ReadProfile(r io.Reader) (Profile, error) {
	var p Profile
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("%w: %w", ErrBadProfile, err)
	}
	return p, p.Validate()
}

//go:embed calibrations/*.json
var calibrations embed.FS

var redLiteMetal = sync.OnceValue(func() Calibration {
	b, err := calibrations.ReadFile("calibrations/redlite-metal-qwen3next-iq2_xxs.json")
	if err == nil {
		var c Calibration
		if c, err = ReadCalibration(bytes.NewReader(b)); err == nil {
			return c
		}
	}
	// The file is compiled in and checked by TestRedLiteMetal; reaching this is a build bug.
	panic("planner: embedded calibration: " + err.Error())
})

// RedLiteMetal returns DwarfStar Red Lite's published Metal constants for Qwen3-Next-80B
// IQ2_XXS (calibrations/redlite-metal-qwen3next-iq2_xxs.json), with which the outcomes in
// DESIGN.md's Planner table are reproduced.
func RedLiteMetal() Calibration { return redLiteMetal() }

// DefaultCalibration is what a backend plans with until a set measured on the machine is
// given (REDLITE_CALIBRATION, from `redlite calibrate`): Red Lite's published constants on
// Metal — and on the harness, which runs the Metal backend and stands in for a Mac in
// tests — and the CPU placeholder on the CPU.
func DefaultCalibration(backend string) Calibration {
	switch backend {
	case "metal", "metal-harness":
		return RedLiteMetal()
	}
	return CPUPlaceholder()
}

// CPUPlaceholder returns the constants for our CPU backend until they are measured (issue 4,
// part 2). TO BE MEASURED: the numbers are Red Lite's Metal set with the CPU page size, so
// plans made with them are only as good as that guess; Status says "placeholder".
func CPUPlaceholder() Calibration {
	c := RedLiteMetal()
	c.Name = "cpu-placeholder"
	c.Backend = "cpu"
	c.Model = "any"
	c.Status = StatusPlaceholder
	c.Source = "not measured: Red Lite's Metal constants stand in until the CPU engine reports its allocations"
	c.AlignmentBytes = 4096
	return c
}
