package ml

import "testing"

// TestExpertCounts checks the counts the expert caches keep: lookups counted, halved after
// ExpertAgeLookups per expert, grown from the zero value, and admission only for a hotter
// expert.
func TestExpertCounts(t *testing.T) {
	c := NewExpertCounts(2)
	for range 3 {
		c.Look(0)
	}
	c.Look(1)
	if c.Of(0) != 3 || c.Of(1) != 1 || !c.Admits(0, 1) || c.Admits(1, 0) || c.Admits(1, 1) {
		t.Errorf("counts %d, %d; admits 0 over 1 %v, 1 over 0 %v, 1 over 1 %v", c.Of(0), c.Of(1), c.Admits(0, 1), c.Admits(1, 0), c.Admits(1, 1))
	}
	for range 2*ExpertAgeLookups - 4 { // the 32nd lookup halves
		c.Look(0)
	}
	if c.Of(0) != (3+2*ExpertAgeLookups-4)/2 || c.Of(1) != 0 {
		t.Errorf("after %d lookups of 2 experts: %d, %d, want halved", 2*ExpertAgeLookups, c.Of(0), c.Of(1))
	}
	var z ExpertCounts
	z.Look(5)
	if z.Of(5) != 1 || z.Of(4) != 0 || z.Of(99) != 0 {
		t.Errorf("zero value: %d %d %d", z.Of(5), z.Of(4), z.Of(99))
	}
	if got := ExpertShare(100, 1, 3); got != 33 {
		t.Errorf("ExpertShare(100, 1, 3) = %d", got)
	}
}
