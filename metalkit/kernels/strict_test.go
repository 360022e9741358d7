package kernels

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/redlite/batch/metalkit/harness"
)

// Every kernel translation unit compiles as Apple's compiler would see it more closely
// than the harness does (harness.CheckStrict): C++14, distinct address spaces, Metal's
// overload sets, no standard library.
func TestStrictCompile(t *testing.T) {
	names, err := fs.Glob(files, "*.metal")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			src, err := buildFile(files, name)
			if err != nil {
				t.Fatal(err)
			}
			err = harness.CheckStrict(context.Background(), src)
			if errors.Is(err, harness.ErrNoCompiler) && os.Getenv("CI") == "" {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
