package ml

// The policy both backends' bounded expert caches keep (engine/cpu and metalkit): each
// weight gets a share of the cache, and within a share the slices looked up most often
// lately stay. A cache shared by every layer in least-recently-used order evicts every slice
// of a layer before the next step returns to it whenever a step touches more than the cache
// holds (a batch of four sequences touches about half of every layer's experts), and then
// nothing hits (metalkit/README.md "Expert cache" has the measurements).

// ExpertAgeLookups is how many lookups per expert, on average, a weight's counts cover
// before they are halved: long enough to tell a hot expert from one chosen by chance in a
// few steps, short enough to follow a document whose topic moves.
const ExpertAgeLookups = 16

// ExpertCounts are one weight's recent lookups per expert. The zero value grows with the
// expert ids seen.
type ExpertCounts struct {
	freq    []uint32
	lookups int
}

// NewExpertCounts returns the counts of a weight of n experts.
func NewExpertCounts(n int) ExpertCounts { return ExpertCounts{freq: make([]uint32, n)} }

// Look records a lookup of expert e, halving every count after ExpertAgeLookups lookups per
// expert.
func (c *ExpertCounts) Look(e int) {
	if e >= len(c.freq) {
		c.freq = append(c.freq, make([]uint32, e+1-len(c.freq))...)
	}
	c.freq[e]++
	if c.lookups++; c.lookups >= ExpertAgeLookups*len(c.freq) {
		c.lookups = 0
		for i := range c.freq {
			c.freq[i] /= 2
		}
	}
}

// Of is expert e's recent lookups.
func (c *ExpertCounts) Of(e int) uint32 {
	if e >= len(c.freq) {
		return 0
	}
	return c.freq[e]
}

// Admits reports whether a slice of expert e takes the place of its weight's coldest held
// slice, of expert v, when the weight's share is full: only if e is looked up more often.
func (c *ExpertCounts) Admits(e, v int) bool { return c.Of(e) > c.Of(v) }

// ExpertShare is a weight's share of a cache of capacity (bytes or slots): in proportion to
// its part of the total of the weights seen.
func ExpertShare(capacity, part, total int64) int64 {
	return int64(float64(capacity) * float64(part) / float64(total))
}
