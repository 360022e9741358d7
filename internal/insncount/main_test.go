package main

import "testing"

// TestCounts checks that every kernel the table names is still found, with the stretches
// it counts, in the assembly as it stands: a renamed label or function fails here instead
// of leaving engine/README.md's table silently stale.
func TestCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("assembles the kernel files")
	}
	for _, k := range kernels {
		n, err := count("../..", k)
		if err != nil {
			t.Error(err)
			continue
		}
		// Every loop does at least one instruction per 16 weights (the widest vector).
		if min := k.values / 16; n < min {
			t.Errorf("%s %s: %d instructions for %d values", k.what, k.arch, n, k.values)
		}
	}
}
