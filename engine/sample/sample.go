// Package sample picks the next token from a row of logits the way llama.cpp's default
// sampler chain does: top-k, then top-p, then min-p, then temperature, then a seeded draw.
// It also holds the stop-string matcher used while streaming decoded text.
package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Defaults are llama.cpp's (common/common.h, common_params_sampling).
const (
	DefaultTopK        = 40
	DefaultTopP        = 0.95
	DefaultMinP        = 0.05
	DefaultTemperature = 0.8
)

// Params configures a Sampler. The zero value is not the default: TopK 0 disables top-k and
// Temperature 0 means greedy, as in llama.cpp. Start from DefaultParams.
type Params struct {
	// TopK keeps the K most likely tokens. 0 or less disables the filter. Default 40.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probabilities add up to at
	// least TopP. 1 disables the filter; 0 keeps only the most likely token. Default 0.95.
	TopP float32
	// MinP drops tokens whose probability is below MinP times the most likely token's.
	// 0 disables the filter. Default 0.05.
	MinP float32
	// Temperature divides the logits before the draw. 0 or less picks the most likely token
	// (greedy, lowest id on ties) and ignores the filters. Default 0.8.
	Temperature float32
	// Seed seeds the draw: the same seed, parameters and logits give the same tokens.
	// Default 0.
	Seed uint64
	// Stream picks one of many independent random sequences of the same seed: the n
	// choices of one request draw from streams 0..n-1, so that they differ, while choice 0
	// draws what the request alone would. Default 0.
	Stream uint64
	// RepetitionPenalty divides the positive logits (and multiplies the negative ones) of
	// tokens already generated, as llama.cpp's penalty_repeat. 0 or 1 disables it.
	RepetitionPenalty float32
	// PresencePenalty is subtracted once from the logit of every token already generated,
	// FrequencyPenalty once per time it was generated (OpenAI's definitions). 0 disables.
	PresencePenalty, FrequencyPenalty float32
}

// Penalized reports whether p changes logits by what was generated.
func (p Params) Penalized() bool {
	return (p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1) || p.PresencePenalty != 0 || p.FrequencyPenalty != 0
}

// DefaultParams returns llama.cpp's default sampling parameters with seed 0.
func DefaultParams() Params {
	return Params{TopK: DefaultTopK, TopP: DefaultTopP, MinP: DefaultMinP, Temperature: DefaultTemperature}
}

// Greedy reports whether p picks the most likely token without drawing.
func (p Params) Greedy() bool { return p.Temperature <= 0 }

// Validate checks every field and names the first bad one.
func (p Params) Validate() error {
	switch {
	case !inUnit(p.TopP):
		return fmt.Errorf("sample: top_p = %v is outside [0, 1]", p.TopP)
	case !inUnit(p.MinP):
		return fmt.Errorf("sample: min_p = %v is outside [0, 1]", p.MinP)
	case math.IsNaN(float64(p.Temperature)) || math.IsInf(float64(p.Temperature), 0):
		return fmt.Errorf("sample: temperature = %v is not a finite number", p.Temperature)
	case !(p.RepetitionPenalty >= 0 && p.RepetitionPenalty <= 10):
		return fmt.Errorf("sample: repetition_penalty = %v is outside [0, 10]", p.RepetitionPenalty)
	case !(p.PresencePenalty >= -2 && p.PresencePenalty <= 2):
		return fmt.Errorf("sample: presence_penalty = %v is outside [-2, 2]", p.PresencePenalty)
	case !(p.FrequencyPenalty >= -2 && p.FrequencyPenalty <= 2):
		return fmt.Errorf("sample: frequency_penalty = %v is outside [-2, 2]", p.FrequencyPenalty)
	}
	return nil
}

func inUnit(x float32) bool { return x >= 0 && x <= 1 } // false for NaN

// ErrNoCandidates is returned when no token can be drawn: empty logits, or every logit -Inf.
var ErrNoCandidates = errors.New("sample: no candidate token")

// candidate is one token during filtering.
type candidate struct {
	id    int32
	logit float32
	p     float32
}

// before is the order of the filters: higher logit first, lower id on ties. It is a strict
// total order, so every selection below has one answer whatever the algorithm.
func before(a, b candidate) bool {
	return a.logit > b.logit || (a.logit == b.logit && a.id < b.id)
}

func compare(a, b candidate) int {
	if before(a, b) {
		return -1
	}
	if before(b, a) {
		return 1
	}
	return 0
}

// A Sampler draws tokens. It keeps its random state and scratch buffers between calls and is
// not safe for concurrent use; use one per sequence.
type Sampler struct {
	params Params
	rng    *rand.Rand
	cand   []candidate
	heap   []candidate
	seen   map[int32]int // generated tokens and their counts, for the penalties
}

// pcgStream is a fixed second PCG word, so a sampler is determined by its seed (and
// Params.Stream) alone.
const pcgStream = 0x5851f42d4c957f2d

// pcg is p's random source: Stream moves the second word by an odd multiple, so every
// stream is its own sequence.
func (p Params) pcg() *rand.PCG { return rand.NewPCG(p.Seed, pcgStream+p.Stream*0x9e3779b97f4a7c15) }

// New returns a sampler for p.
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{params: p, rng: rand.New(p.pcg())}, nil
}

// Params returns the sampler's parameters.
func (s *Sampler) Params() Params { return s.params }

// Reset restarts the random sequence from the seed and forgets the generated tokens.
func (s *Sampler) Reset() {
	s.rng = rand.New(s.params.pcg())
	s.seen = nil
}

// Accept records a generated token for the penalties.
func (s *Sampler) Accept(id int32) {
	if !s.params.Penalized() {
		return
	}
	if s.seen == nil {
		s.seen = map[int32]int{}
	}
	s.seen[id]++
}

// Penalize applies the repetition, presence and frequency penalties to logits in place,
// over the tokens accepted so far (the generated ones; the prompt does not count).
func (s *Sampler) Penalize(logits []float32) {
	rep := s.params.RepetitionPenalty
	for id, n := range s.seen {
		if int(id) >= len(logits) {
			continue
		}
		l := logits[id]
		if rep != 0 && rep != 1 {
			if l > 0 {
				l /= rep
			} else {
				l *= rep
			}
		}
		logits[id] = l - float32(n)*s.params.FrequencyPenalty - s.params.PresencePenalty
	}
}

// Sample picks a token id from one row of logits (one entry per vocabulary token). The
// logits are not modified. A NaN or +Inf logit is an error; -Inf logits are never drawn.
func (s *Sampler) Sample(logits []float32) (int32, error) {
	if len(logits) == 0 {
		return 0, fmt.Errorf("%w: empty logits", ErrNoCandidates)
	}
	if len(logits) > math.MaxInt32 {
		return 0, fmt.Errorf("sample: %d logits exceed the int32 token id range", len(logits))
	}
	if s.params.Greedy() {
		return Argmax(logits)
	}
	var c []candidate
	sorted := false
	if k := s.params.TopK; k > 0 && k < len(logits) {
		// Select straight from the logits: building a candidate per token would cost more
		// than the selection itself.
		h := s.heap[:0]
		for i, l := range logits {
			if len(h) == k && l < h[0].logit { // the common case; false for NaN, so it is caught below
				continue
			}
			if err := checkLogit(i, l); err != nil {
				return 0, err
			}
			if !math.IsInf(float64(l), -1) {
				h = offer(h, candidate{id: int32(i), logit: l}, k)
			}
		}
		slices.SortFunc(h, compare)
		s.heap = h
		c = append(s.cand[:0], h...)
		sorted = true
	} else {
		c = s.cand[:0]
		for i, l := range logits {
			if err := checkLogit(i, l); err != nil {
				return 0, err
			}
			if !math.IsInf(float64(l), -1) {
				c = append(c, candidate{id: int32(i), logit: l})
			}
		}
	}
	s.cand = c
	if len(c) == 0 {
		return 0, fmt.Errorf("%w: all %d logits are -Inf", ErrNoCandidates, len(logits))
	}
	if s.params.TopP < 1 {
		c = s.topP(c, s.params.TopP, sorted)
		sorted = true
	}
	if s.params.MinP > 0 {
		c = minP(c, s.params.MinP, sorted)
	}
	t := s.params.Temperature
	for i := range c {
		c[i].logit /= t
	}
	return c[s.draw(c)].id, nil
}

func checkLogit(i int, l float32) error {
	if math.IsNaN(float64(l)) {
		return fmt.Errorf("sample: logit of token %d is NaN", i)
	}
	if math.IsInf(float64(l), 1) {
		return fmt.Errorf("sample: logit of token %d is +Inf", i)
	}
	return nil
}

// Argmax returns the id of the largest logit, the lowest id among equal ones.
func Argmax(logits []float32) (int32, error) {
	if len(logits) == 0 {
		return 0, fmt.Errorf("%w: empty logits", ErrNoCandidates)
	}
	best, bestL := 0, logits[0]
	for i, l := range logits {
		if l > bestL {
			best, bestL = i, l
		} else if l != l {
			return 0, checkLogit(i, l)
		}
	}
	if err := checkLogit(best, bestL); err != nil { // NaN at 0, or +Inf
		return 0, err
	}
	return int32(best), nil
}

// offer adds x to h, a min-heap on "before" of at most k elements (h[0] is the worst of the
// best so far), if x belongs among the best k. A heap over the vocabulary costs about one
// comparison per token, where a sort would cost log n.
func offer(h []candidate, x candidate, k int) []candidate {
	if len(h) < k {
		h = append(h, x)
		for i := len(h) - 1; i > 0; { // sift up
			parent := (i - 1) / 2
			if !before(h[parent], h[i]) {
				break
			}
			h[parent], h[i] = h[i], h[parent]
			i = parent
		}
		return h
	}
	if !before(x, h[0]) {
		return h
	}
	h[0] = x
	for i := 0; ; { // sift down
		l, r, m := 2*i+1, 2*i+2, i
		if l < k && before(h[m], h[l]) {
			m = l
		}
		if r < k && before(h[m], h[r]) {
			m = r
		}
		if m == i {
			return h
		}
		h[m], h[i] = h[i], h[m]
		i = m
	}
}

// softmax sets c[i].p, with llama.cpp's float32 arithmetic.
func softmax(c []candidate) {
	maxL := c[0].logit
	for _, x := range c[1:] {
		maxL = max(maxL, x.logit)
	}
	var sum float32
	for i := range c {
		c[i].p = float32(math.Exp(float64(c[i].logit - maxL)))
		sum += c[i].p
	}
	for i := range c {
		c[i].p /= sum
	}
}

// topPBuckets is the resolution of the logit histogram topP uses to avoid sorting the
// whole vocabulary.
const topPBuckets = 1024

// topP keeps the shortest most-likely prefix whose probability reaches p (at least one
// token) and returns it sorted. Unsorted input is first cut down with a histogram of the
// logits: the buckets from the top until their mass reaches p hold every token of the
// prefix, and only those are sorted.
func (s *Sampler) topP(c []candidate, p float32, sorted bool) []candidate {
	softmax(c)
	if !sorted && len(c) > topPBuckets {
		if n := bucketPrefix(c, p); n < len(c) {
			head := c[:n]
			slices.SortFunc(head, compare)
			if k, ok := nucleus(head, p); ok {
				return c[:k]
			}
		}
	}
	if !sorted {
		slices.SortFunc(c, compare)
	}
	n, _ := nucleus(c, p)
	return c[:n]
}

// bucketPrefix moves to the front of c every candidate whose logit bucket lies above the
// point where the buckets' probability reaches p, and returns how many there are. The
// bucket index falls monotonically with the logit, so the moved set is a prefix of the
// sorted order.
func bucketPrefix(c []candidate, p float32) int {
	hi, lo := c[0].logit, c[0].logit
	for _, x := range c[1:] {
		hi, lo = max(hi, x.logit), min(lo, x.logit)
	}
	if hi == lo {
		return len(c)
	}
	scale := float32(topPBuckets) / (hi - lo)
	bucket := func(l float32) int { return min(int((hi-l)*scale), topPBuckets-1) }
	var mass [topPBuckets]float32
	for _, x := range c {
		mass[bucket(x.logit)] += x.p
	}
	last, cum := topPBuckets-1, float32(0)
	for b, m := range mass {
		if cum += m; cum >= p {
			last = b
			break
		}
	}
	n := 0
	for i, x := range c {
		if bucket(x.logit) <= last {
			c[i], c[n] = c[n], c[i]
			n++
		}
	}
	return n
}

// nucleus returns the length of the shortest prefix of sorted c whose probability reaches
// p, and false if no prefix does (rounding), in which case it returns len(c).
func nucleus(c []candidate, p float32) (int, bool) {
	var cum float32
	for i, x := range c {
		cum += x.p
		if cum >= p {
			return i + 1, true
		}
	}
	return len(c), false
}

// minP keeps the candidates whose logit is at least the best logit + ln(p), i.e. whose
// probability is at least p times the best one's. Order is preserved.
func minP(c []candidate, p float32, sorted bool) []candidate {
	maxL := c[0].logit
	if !sorted {
		for _, x := range c[1:] {
			maxL = max(maxL, x.logit)
		}
	}
	minL := maxL + float32(math.Log(float64(p)))
	if sorted {
		n := 1 // the best token always stays
		for n < len(c) && c[n].logit >= minL {
			n++
		}
		return c[:n]
	}
	out := c[:0]
	for _, x := range c {
		if x.logit >= minL {
			out = append(out, x)
		}
	}
	return out
}

// draw picks an index of c with probability softmax(logit): a uniform number in [0, 1)
// scaled by the total, found on the running sum in the order of c (as llama.cpp's dist
// sampler does, with its float32 probabilities and float64 sums).
func (s *Sampler) draw(c []candidate) int {
	if len(c) == 1 {
		return 0
	}
	maxL := c[0].logit
	for _, x := range c[1:] {
		maxL = max(maxL, x.logit)
	}
	var sum float64
	for i := range c {
		c[i].p = float32(math.Exp(float64(c[i].logit - maxL)))
		sum += float64(c[i].p)
	}
	target := sum * s.rng.Float64()
	var run float64
	for i, x := range c {
		run += float64(x.p)
		if run >= target && x.p > 0 { // a zero-probability token is never drawn, even for target 0
			return i
		}
	}
	return len(c) - 1
}
