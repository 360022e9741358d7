package planner

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Sentinels at the package edge; every error the planner returns matches one of them.
var (
	// ErrDoesNotFit: no plan fits the budget (a *DoesNotFitError says why and what would).
	ErrDoesNotFit = errors.New("job does not fit")
	// ErrBadJob: the job or its policy is invalid, or asks for more than the model's trained
	// context. No worker can take it.
	ErrBadJob = errors.New("bad job")
	// ErrBadProfile, ErrBadCalibration, ErrBadBudget: the named input is invalid.
	ErrBadProfile     = errors.New("bad model profile")
	ErrBadCalibration = errors.New("bad calibration")
	ErrBadBudget      = errors.New("bad budget")
	// ErrBadConfig: Estimate was asked to price an impossible configuration.
	ErrBadConfig = errors.New("bad plan configuration")
)

// DoesNotFitError explains why no plan fits and what would. It matches ErrDoesNotFit.
type DoesNotFitError struct {
	PromptTokens int `json:"prompt_tokens"`
	MaxTokens    int `json:"max_tokens"`
	Slots        int `json:"slots"`
	// NeedMiB is what the cheapest plan the policy allows needs with every expert resident;
	// Nearest is that plan.
	NeedMiB int64  `json:"need_mib"`
	Nearest Config `json:"nearest"`
	// LimitMiB is the usable limit (GPULimitMiB − MarginMiB).
	LimitMiB    int64 `json:"limit_mib"`
	GPULimitMiB int64 `json:"gpu_limit_mib"`
	MarginMiB   int64 `json:"margin_mib"`
	// SmallestLimitMiB is the smallest GPU limit (same margin) on which the job fits.
	SmallestLimitMiB int64 `json:"smallest_limit_mib"`
	// Largest is the longest context (prompt + max_tokens per slot) this worker can take, with
	// the settings it would use; Largest.Context is 0 when it cannot hold the model at all.
	Largest Config `json:"largest"`
	// MaxTokensFit is the largest max_tokens that fits for this prompt; 0 when the prompt
	// alone is too long.
	MaxTokensFit int           `json:"max_tokens_fit"`
	Alternatives []Alternative `json:"alternatives"`
}

func (e *DoesNotFitError) Is(target error) bool { return target == ErrDoesNotFit }

func (e *DoesNotFitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "needs %s MiB (%s) but the limit is %s MiB", commas(e.NeedMiB), e.Nearest.String(), commas(e.LimitMiB))
	if e.MarginMiB > 0 {
		fmt.Fprintf(&b, " (%s MiB GPU limit − %s MiB margin)", commas(e.GPULimitMiB), commas(e.MarginMiB))
	}
	worker := fmt.Sprintf("on a worker with ≥ %s MiB", commas(e.SmallestLimitMiB))
	if e.MarginMiB > 0 {
		worker = fmt.Sprintf("on a worker with a GPU limit ≥ %s MiB", commas(e.SmallestLimitMiB))
	}
	switch {
	case e.MaxTokensFit > 0:
		fmt.Fprintf(&b, "; fits with max_tokens ≤ %s or %s", commas(int64(e.MaxTokensFit)), worker)
	case e.Largest.Context > 0:
		fmt.Fprintf(&b, "; this worker takes at most %s tokens of prompt + output (%s), fewer than the %s-token prompt; fits %s",
			commas(int64(e.Largest.Context)), e.Largest.String(), commas(int64(e.PromptTokens)), worker)
	default:
		fmt.Fprintf(&b, "; this worker cannot hold the model even for a one-token job; fits %s", worker)
	}
	return b.String()
}

// String names a configuration the way the errors and the CLI print it: "f16 KV, 512-token chunks".
func (c Config) String() string {
	parts := []string{c.KV.String() + " KV", strconv.Itoa(c.Chunk) + "-token chunks"}
	if c.MTP {
		parts = append(parts, "MTP")
	}
	if c.Residency == ResidencyCache {
		parts = append(parts, fmt.Sprintf("%s MiB expert cache", commas(c.ExpertCacheBytes/MiB)))
	}
	if c.Slots > 1 {
		parts = append(parts, fmt.Sprintf("%d slots", c.Slots))
	}
	return strings.Join(parts, ", ")
}

// commas writes n with thousands separators: 21886 → "21,886".
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Commas formats n with thousands separators, as the planner's messages do.
func Commas(n int64) string { return commas(n) }
