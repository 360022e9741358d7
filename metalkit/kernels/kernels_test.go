package kernels_test

import (
	"strings"
	"testing"

	"github.com/redlite/batch/metalkit/harness/harnesstest"
	"github.com/redlite/batch/metalkit/kernels"
)

func TestSourceInlinesHeadersOnce(t *testing.T) {
	src := kernels.Source()
	if n := strings.Count(src, "#line 1 \"common.h\""); n != 1 {
		t.Errorf("common.h inlined %d times, want 1", n)
	}
	if strings.Contains(src, "#include \"") {
		t.Error("Source still has an #include of our own headers")
	}
}

// TestLibraryCompiles: the whole library compiles for the harness (and its kernels are
// listed).
func TestLibraryCompiles(t *testing.T) {
	harnesstest.Device(t)
}
