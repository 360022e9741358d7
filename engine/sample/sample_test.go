package sample

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// only returns params with every filter off and temperature 1.
func only() Params { return Params{TopK: 0, TopP: 1, MinP: 0, Temperature: 1} }

// support draws n tokens and returns how often each id appeared.
func support(t *testing.T, p Params, logits []float32, n int) map[int32]int {
	t.Helper()
	s, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int32]int{}
	for range n {
		id, err := s.Sample(logits)
		if err != nil {
			t.Fatal(err)
		}
		seen[id]++
	}
	return seen
}

func keys(m map[int32]int) []int32 {
	var ks []int32
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestGreedy(t *testing.T) {
	for _, temp := range []float32{0, -1} {
		p := DefaultParams()
		p.Temperature = temp
		s, err := New(p)
		if err != nil {
			t.Fatal(err)
		}
		logits := []float32{0.5, 3, -2, 3, 1}
		for range 5 {
			id, err := s.Sample(logits)
			if err != nil {
				t.Fatal(err)
			}
			if id != 1 {
				t.Fatalf("temperature %v: got %d, want 1 (argmax, lowest id on ties)", temp, id)
			}
		}
	}
}

func TestFilters(t *testing.T) {
	// Probabilities at temperature 1: softmax of these logits.
	logits := []float32{1, 4, 2, 0, 3, -1, 4}
	// order: ids 1 and 6 (logit 4), 4 (3), 2 (2), 0 (1), 3 (0), 5 (-1)
	tests := []struct {
		name string
		p    Params
		want []int32
	}{
		{"TopK1", Params{TopK: 1, TopP: 1, Temperature: 1}, []int32{1}},
		{"TopK2", Params{TopK: 2, TopP: 1, Temperature: 1}, []int32{1, 6}},
		{"TopK3", Params{TopK: 3, TopP: 1, Temperature: 1}, []int32{1, 4, 6}},
		{"TopKLargerThanVocab", Params{TopK: 100, TopP: 1, Temperature: 1}, []int32{0, 1, 2, 3, 4, 5, 6}},
		// p = 0.3879 each for ids 1 and 6, then 0.1427 for id 4: 0.7758 < 0.8 <= 0.9185.
		{"TopP0.8", Params{TopP: 0.8, Temperature: 1}, []int32{1, 4, 6}},
		{"TopP0.77", Params{TopP: 0.77, Temperature: 1}, []int32{1, 6}},
		{"TopP0", Params{TopP: 0, Temperature: 1}, []int32{1}},
		// min-p 0.3: keep logit >= 4 + ln 0.3 = 2.796.
		{"MinP0.3", Params{TopP: 1, MinP: 0.3, Temperature: 1}, []int32{1, 4, 6}},
		{"MinP1", Params{TopP: 1, MinP: 1, Temperature: 1}, []int32{1, 6}},
		// Chain: top-k 4 keeps {1,6,4,2}; top-p 0.9 over those (0.424,0.424,0.156,0.057) keeps 3.
		{"Chain", Params{TopK: 4, TopP: 0.9, MinP: 0.01, Temperature: 1}, []int32{1, 4, 6}},
		// Temperature does not change the filtered set, only the odds.
		{"ChainHotTemperature", Params{TopK: 4, TopP: 0.9, MinP: 0.01, Temperature: 5}, []int32{1, 4, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := keys(support(t, tt.p, logits, 10_000))
			if !slices.Equal(got, tt.want) {
				t.Errorf("tokens drawn over 10k draws = %v, want exactly %v", got, tt.want)
			}
		})
	}
}

func TestNegativeInfinityNeverDrawn(t *testing.T) {
	inf := float32(math.Inf(-1))
	got := keys(support(t, only(), []float32{inf, 0, inf, 0.5, inf}, 10_000))
	if !slices.Equal(got, []int32{1, 3}) {
		t.Fatalf("drawn %v, want [1 3]", got)
	}
}

func TestFrequencies(t *testing.T) {
	// Two tokens with logits ln 3 and 0: odds 3:1. 10k draws have a standard deviation of
	// 43 around 7500; 7,000..8,000 is more than 11 deviations wide.
	counts := support(t, only(), []float32{float32(math.Log(3)), 0}, 10_000)
	if c := counts[0]; c < 7000 || c > 8000 {
		t.Fatalf("token 0 drawn %d of 10000 times, want about 7500", c)
	}
	// Temperature 0.5 squares the odds: 9:1.
	p := only()
	p.Temperature = 0.5
	counts = support(t, p, []float32{float32(math.Log(3)), 0}, 10_000)
	if c := counts[0]; c < 8700 || c > 9300 {
		t.Fatalf("temperature 0.5: token 0 drawn %d of 10000 times, want about 9000", c)
	}
}

func randomLogits(n int, seed uint64, std float64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64() * std)
	}
	return l
}

func TestReproducible(t *testing.T) {
	logits := randomLogits(151_936, 7, 2)
	run := func(seed uint64) []int32 {
		p := DefaultParams()
		p.Seed = seed
		s, err := New(p)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int32
		for range 200 {
			id, err := s.Sample(logits)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	a, b, c := run(42), run(42), run(43)
	if !slices.Equal(a, b) {
		t.Fatal("same seed gave different tokens")
	}
	if slices.Equal(a, c) {
		t.Fatal("seeds 42 and 43 gave the same 200 tokens")
	}
	// Reset restarts the sequence.
	p := DefaultParams()
	p.Seed = 42
	s, _ := New(p)
	first, _ := s.Sample(logits)
	s.Reset()
	again, _ := s.Sample(logits)
	if first != again || first != a[0] {
		t.Fatalf("after Reset got %d, want %d", again, first)
	}
}

// TestFilteredSetOnLargeVocab checks every filter path on a vocabulary-sized row: the drawn
// tokens must lie in the set computed here by a full sort.
func TestFilteredSetOnLargeVocab(t *testing.T) {
	// Standard deviation 4 puts about 85% of the probability in the 256 best tokens, so
	// top-p 0.5 stays within the first partial selection and 0.999 needs the full sort.
	logits := randomLogits(151_936, 3, 4)
	order := make([]candidate, len(logits))
	for i, l := range logits {
		order[i] = candidate{id: int32(i), logit: l}
	}
	slices.SortFunc(order, compare)
	softmax(order) // softmax is order independent
	allowed := func(k int, p, minp float32) map[int32]bool {
		set := order
		if k > 0 {
			set = slices.Clone(order[:k])
			softmax(set)
		}
		if p < 1 {
			n, _ := nucleus(set, p)
			set = set[:n]
		}
		out := map[int32]bool{}
		for _, c := range set {
			if minp == 0 || c.logit >= set[0].logit+float32(math.Log(float64(minp))) {
				out[c.id] = true
			}
		}
		return out
	}
	cases := []struct {
		name  string
		p     Params
		draws int
	}{
		// Fewer draws than on the hand-made rows: each costs a pass over 152k logits.
		{"Defaults", DefaultParams(), 2000},
		{"TopPOnlyUnsorted", Params{TopP: 0.5, Temperature: 1}, 500},
		{"TopPOnlyBeyondGuess", Params{TopP: 0.999, Temperature: 1}, 100}, // sorts 152k per draw
		{"MinPOnlyUnsorted", Params{TopP: 1, MinP: 0.3, Temperature: 1}, 1000},
		{"TopKOnly", Params{TopK: 5, TopP: 1, Temperature: 2}, 2000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := allowed(tc.p.TopK, tc.p.TopP, tc.p.MinP)
			got := support(t, tc.p, logits, tc.draws)
			for id := range got {
				if !want[id] {
					t.Fatalf("drew token %d (logit %v), which the filters exclude", id, logits[id])
				}
			}
			if len(want) > 1 && len(got) < 2 {
				t.Fatalf("only %d distinct tokens drawn from an allowed set of %d", len(got), len(want))
			}
		})
	}
}

func TestValidate(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		p     Params
		field string
	}{
		{Params{TopP: 1.5}, "top_p"},
		{Params{TopP: -0.1}, "top_p"},
		{Params{TopP: nan}, "top_p"},
		{Params{TopP: 1, MinP: 2}, "min_p"},
		{Params{TopP: 1, Temperature: nan}, "temperature"},
		{Params{TopP: 1, Temperature: float32(math.Inf(1))}, "temperature"},
	}
	for _, tt := range tests {
		err := tt.p.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tt.p, err, tt.field)
		}
		if _, err := New(tt.p); err == nil {
			t.Errorf("New(%+v) accepted bad params", tt.p)
		}
	}
	if err := DefaultParams().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

func TestBadLogits(t *testing.T) {
	for _, temp := range []float32{0, 1} {
		p := only()
		p.Temperature = temp
		s, _ := New(p)
		if _, err := s.Sample(nil); !errors.Is(err, ErrNoCandidates) {
			t.Errorf("temperature %v, empty logits: err = %v", temp, err)
		}
		if _, err := s.Sample([]float32{0, float32(math.NaN())}); err == nil || !strings.Contains(err.Error(), "token 1 is NaN") {
			t.Errorf("temperature %v, NaN: err = %v", temp, err)
		}
		if _, err := s.Sample([]float32{float32(math.Inf(1))}); err == nil || !strings.Contains(err.Error(), "+Inf") {
			t.Errorf("temperature %v, +Inf: err = %v", temp, err)
		}
	}
	s, _ := New(only())
	inf := float32(math.Inf(-1))
	if _, err := s.Sample([]float32{inf, inf}); !errors.Is(err, ErrNoCandidates) {
		t.Errorf("all -Inf: err = %v", err)
	}
}

func TestSampleDoesNotModifyLogits(t *testing.T) {
	logits := randomLogits(1000, 5, 2)
	orig := slices.Clone(logits)
	s, _ := New(DefaultParams())
	for range 10 {
		if _, err := s.Sample(logits); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(orig, logits) {
		t.Fatal("Sample changed its input")
	}
}

func benchmarkSample(b *testing.B, p Params) {
	logits := randomLogits(151_936, 11, 2)
	s, err := New(p)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Sample(logits); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSampleDefaults(b *testing.B) { benchmarkSample(b, DefaultParams()) }
func BenchmarkSampleGreedy(b *testing.B)   { benchmarkSample(b, Params{TopP: 1}) }
func BenchmarkSampleTopPOnly(b *testing.B) {
	benchmarkSample(b, Params{TopP: 0.95, Temperature: 0.8})
}
func BenchmarkSampleMinPOnly(b *testing.B) {
	benchmarkSample(b, Params{TopP: 1, MinP: 0.05, Temperature: 0.8})
}

func TestTopPTiesKeepLowestIDs(t *testing.T) {
	// 2000 equal logits: the nucleus of 0.5 is the first 1000 ids (one more for rounding).
	logits := make([]float32, 2000)
	got := support(t, Params{TopP: 0.5, Temperature: 1}, logits, 2000)
	for id := range got {
		if id > 1000 {
			t.Fatalf("drew id %d; ties must be broken toward low ids", id)
		}
	}
	// Same with two distinct values so that the histogram path runs.
	logits[1999] = -1
	got = support(t, Params{TopP: 0.5, Temperature: 1}, logits, 2000)
	for id := range got {
		if id > 1000 {
			t.Fatalf("histogram path: drew id %d", id)
		}
	}
}

func TestPenalties(t *testing.T) {
	p := Params{Temperature: 0, RepetitionPenalty: 2, PresencePenalty: 0.5, FrequencyPenalty: 0.25}
	s, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int32{1, 2, 2} {
		s.Accept(id)
	}
	logits := []float32{1, 4, -2, 3}
	s.Penalize(logits)
	want := []float32{1, 4/2.0 - 0.25 - 0.5, -2*2 - 2*0.25 - 0.5, 3}
	for i := range want {
		if math.Abs(float64(logits[i]-want[i])) > 1e-6 {
			t.Errorf("logit %d: %v, want %v", i, logits[i], want[i])
		}
	}
	s.Reset()
	logits = []float32{1, 4, -2, 3}
	s.Penalize(logits)
	if logits[1] != 4 {
		t.Errorf("after Reset the penalties still apply: %v", logits)
	}
	for _, bad := range []Params{{RepetitionPenalty: -1}, {PresencePenalty: 3}, {FrequencyPenalty: float32(math.NaN())}} {
		if bad.Validate() == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestLogprobsTop(t *testing.T) {
	inf := float32(math.Inf(-1))
	lp := Logprobs([]float32{0, 2, inf, 2, 1}, 4, 30)
	if len(lp.Top) != 4 || lp.Top[0].ID != 1 || lp.Top[1].ID != 3 || lp.Top[2].ID != 4 || lp.Top[3].ID != 0 {
		t.Fatalf("top %+v", lp.Top)
	}
	sum := math.Exp(0) + 2*math.Exp(2) + math.Exp(1)
	if d := math.Abs(float64(lp.Logprob) - (1 - math.Log(sum))); d > 1e-6 {
		t.Errorf("logprob %v, want %v", lp.Logprob, 1-math.Log(sum))
	}
}
