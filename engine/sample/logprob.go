package sample

import (
	"math"
	"slices"
)

// MaxTopLogprobs is the most alternatives a TokenLogprob lists (OpenAI's bound).
const MaxTopLogprobs = 20

// TokenLogprob is the log-probability of a chosen token and of the most likely tokens at
// its step.
type TokenLogprob struct {
	ID      int32
	Logprob float32
	Top     []TopLogprob // most likely first (lower id on ties)
}

// TopLogprob is one alternative.
type TopLogprob struct {
	ID      int32
	Logprob float32
}

// Logprobs returns the log-softmax of logits at id and the top most likely tokens (at most
// MaxTopLogprobs). -Inf logits (masked tokens) have probability 0 and are never listed.
// The sum is taken in float64 so that the numbers do not depend on the vocabulary's order.
func Logprobs(logits []float32, id int32, top int) TokenLogprob {
	maxL := float32(math.Inf(-1))
	for _, l := range logits {
		maxL = max(maxL, l)
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l - maxL))
	}
	lse := float64(maxL) + math.Log(sum)
	out := TokenLogprob{ID: id, Logprob: float32(float64(logits[id]) - lse)}
	top = min(max(top, 0), MaxTopLogprobs)
	if top == 0 {
		return out
	}
	h := make([]candidate, 0, top)
	for i, l := range logits {
		if math.IsInf(float64(l), -1) {
			continue
		}
		h = offer(h, candidate{id: int32(i), logit: l}, top)
	}
	slices.SortFunc(h, compare)
	out.Top = make([]TopLogprob, len(h))
	for i, c := range h {
		out.Top[i] = TopLogprob{ID: c.id, Logprob: float32(float64(c.logit) - lse)}
	}
	return out
}
