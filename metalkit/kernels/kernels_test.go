package kernels_test

import (
	"strings"
	"testing"

	"github.com/redlite/batch/metalkit/harness"
	"github.com/redlite/batch/metalkit/harness/harnesstest"
	"github.com/redlite/batch/metalkit/kernels"
)

// No kernel of the library declares more threadgroup memory than a threadgroup has (a GPU
// would refuse its pipeline).
func TestThreadgroupMemoryOfEveryKernel(t *testing.T) {
	if err := harnesstest.Device(t).(*harness.Device).CheckThreadgroupMemory(); err != nil {
		t.Fatal(err)
	}
}

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
