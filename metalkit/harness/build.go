package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlite/batch/metalkit/device"
)

var (
	//go:embed cxx/msl.h
	mslHeader string
	//go:embed cxx/msl_swizzle.h
	mslSwizzle string
	//go:embed cxx/harness_abi.h
	abiHeader string
	//go:embed cxx/runtime.cpp
	runtimeSource string
)

// Compiler is the clang the harness compiles with: Debian's clang-16 package. $REDLITE_CLANG
// overrides it.
func Compiler() string {
	if c := os.Getenv("REDLITE_CLANG"); c != "" {
		return c
	}
	return "clang++-16"
}

// ErrNoCompiler is returned when the compiler is not installed.
var ErrNoCompiler = errors.New("harness: clang++-16 not found (apt-get install clang-16)")

// cflags: C++20 for std::source_location and concepts; line tables are enough for ASan's
// symbolised reports. -O1 (REDLITE_HARNESS_OPT overrides it): on the matrix kernels it
// compiles in ~30 s against ~7 s at -O0, but their tests run 3 times faster.
var cflags = []string{
	"-std=c++20", optLevel(), "-gline-tables-only", "-fsanitize=address", "-fno-omit-frame-pointer",
	"-fsigned-char", // MSL's char is signed; C++'s is not on arm64
	// half arithmetic rounds after every operation, as the GPU's half ALUs do (clang keeps
	// float intermediates by default).
	"-Xclang", "-ffloat16-excess-precision=none",
	f16c(),
	"-Wno-unknown-attributes", "-Wno-unknown-pragmas", "-Wno-gnu-anonymous-struct",
	"-Wno-nested-anon-types", "-Wno-unused-value", "-ferror-limit=20", "-fno-color-diagnostics",
}

// runtimeFlags: the runtime is not instrumented (its own memory is not what we check, and the
// checks cost a third of a fiber switch); it still calls ASan's fiber annotations, and its
// mallocs are ASan's, since the executable links the sanitizer.
var runtimeFlags = []string{"-std=c++20", "-O2", "-gline-tables-only", "-fno-omit-frame-pointer", "-DMSL_ASAN=1",
	"-DMSL_MAX_SHARED=" + strconv.Itoa(device.MaxThreadgroupMemory)}

// f16c turns on the x86 half-conversion instructions where the CPU has them (the executable
// runs where it is built): without them every half load is a library call. The flag is part
// of the cache key, so a cache moved to an older CPU rebuilds.
func f16c() string {
	if runtime.GOARCH != "amd64" {
		return "-DMSL_NO_F16C"
	}
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil || !regexp.MustCompile(`(?m)^flags\s*:.*\bf16c\b`).Match(info) {
		return "-DMSL_NO_F16C"
	}
	return "-mf16c"
}

func optLevel() string {
	if o := os.Getenv("REDLITE_HARNESS_OPT"); o != "" {
		return o
	}
	return "-O1"
}

// buildVersion is part of every cache key: change it when the build itself changes in a way
// the inputs do not show.
const buildVersion = "2"

// cacheRoot is where built executables are kept, by the hash of everything they are built
// from: $REDLITE_HARNESS_CACHE, else the user's cache directory.
func cacheRoot() (string, error) {
	if d := os.Getenv("REDLITE_HARNESS_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "redlite-harness"), nil
	}
	return filepath.Join(d, "redlite", "harness"), nil
}

var versionOnce struct {
	sync.Once
	v   string
	err error
}

func compilerVersion() (string, error) {
	versionOnce.Do(func() {
		path, err := exec.LookPath(Compiler())
		if err != nil {
			versionOnce.err = fmt.Errorf("%w: %v", ErrNoCompiler, err)
			return
		}
		out, err := exec.Command(path, "--version").Output()
		if err != nil {
			versionOnce.err = fmt.Errorf("harness: %s --version: %w", path, err)
			return
		}
		versionOnce.v = path + "\n" + string(out)
	})
	return versionOnce.v, versionOnce.err
}

func hashOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d\n%s", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:24]
}

// writeShim puts the shim headers in dir.
func writeShim(dir string) error {
	for name, text := range map[string]string{"msl.h": mslHeader, "msl_swizzle.h": mslSwizzle, "harness_abi.h": abiHeader} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// clang runs the compiler in dir and returns its messages as the error.
func clang(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, Compiler(), args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if len(msg) > 8000 {
			msg = msg[:8000] + "\n…"
		}
		return fmt.Errorf("%v\n%s", err, msg)
	}
	return nil
}

// buildCached returns the path of the executable built from lib (the generated library
// source) and the runtime, building it unless the cache holds it.
func buildCached(ctx context.Context, lib string) (string, error) {
	ver, err := compilerVersion()
	if err != nil {
		return "", err
	}
	root, err := cacheRoot()
	if err != nil {
		return "", err
	}
	flags := strings.Join(cflags, " ")
	shim := mslHeader + mslSwizzle + abiHeader
	exe := filepath.Join(root, hashOf("exe", buildVersion, ver, flags, shim, runtimeSource, lib), "harness")
	if _, err := os.Stat(exe); err == nil {
		now := time.Now()
		os.Chtimes(filepath.Dir(exe), now, now) // used: keep it from pruning
		return exe, nil
	}
	defer prune(root)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("harness: cache: %w", err)
	}
	unlock, err := lockFile(filepath.Dir(exe) + ".lock") // per library: others build meanwhile
	if err != nil {
		return "", fmt.Errorf("harness: cache: %w", err)
	}
	defer unlock()
	if _, err := os.Stat(exe); err == nil {
		return exe, nil // another process built it while we waited
	}
	// The runtime object is cached on its own: it changes less often than the kernels.
	rtObj := filepath.Join(root, hashOf("runtime", buildVersion, ver, strings.Join(runtimeFlags, " "), abiHeader, runtimeSource), "runtime.o")
	if _, err := os.Stat(rtObj); err != nil {
		if err := buildInto(rtObj, func(dir, out string) error {
			if err := writeShim(dir); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, "runtime.cpp"), []byte(runtimeSource), 0o644); err != nil {
				return err
			}
			if err := clang(ctx, dir, append(append([]string{}, runtimeFlags...), "-fdebug-prefix-map="+dir+"=harness", "-c", "runtime.cpp", "-o", out)...); err != nil {
				return fmt.Errorf("harness: compiling the runtime: %w", err)
			}
			return nil
		}); err != nil {
			return "", err
		}
	}
	err = buildInto(exe, func(dir, out string) error {
		if err := writeShim(dir); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "library.cpp"), []byte("#include \"msl.h\"\n#line 1 \"library.metal\"\n"+lib), 0o644); err != nil {
			return err
		}
		// Reports name harness/msl.h, not the temporary build directory.
		if err := clang(ctx, dir, append(append([]string{}, cflags...), "-fdebug-prefix-map="+dir+"=harness", "-c", "library.cpp", "-o", "library.o")...); err != nil {
			return fmt.Errorf("harness: compiling the kernels: %w", err)
		}
		if err := clang(ctx, dir, "-fsanitize=address", "-pthread", "library.o", rtObj, "-o", out); err != nil {
			return fmt.Errorf("harness: linking: %w", err)
		}
		return nil
	})
	return exe, err
}

// cacheMaxAge: builds unused for this long are removed when a new one is made (each is a
// few MB; every edit of a kernel makes one).
const cacheMaxAge = 7 * 24 * time.Hour

func prune(root string) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > cacheMaxAge {
			os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
}

// buildInto builds final's content in a fresh directory beside it and renames it into
// place, so that concurrent test processes never see a half-written file.
func buildInto(final string, build func(dir, out string) error) error {
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return fmt.Errorf("harness: cache: %w", err)
	}
	dir, err := os.MkdirTemp(filepath.Dir(final), "build-")
	if err != nil {
		return fmt.Errorf("harness: cache: %w", err)
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "out")
	if err := build(dir, out); err != nil {
		return err
	}
	if err := os.Rename(out, final); err != nil {
		return fmt.Errorf("harness: cache: %w", err)
	}
	return nil
}

// RunHost compiles prelude (MSL declarations: structs, constants; rewritten as the library
// is) with body as the body of a host main function, runs it, and returns its standard
// output. The kernels package's layout test prints clang's sizeof and offsetof with it.
// printf is declared; nothing else of the C library is.
func RunHost(ctx context.Context, prelude, body string) (string, error) {
	if _, err := compilerVersion(); err != nil {
		return "", err
	}
	g, err := generate(prelude)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "redlite-harness-host-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := writeShim(dir); err != nil {
		return "", err
	}
	prog := "#include \"msl.h\"\nextern \"C\" int printf(const char *, ...);\n#line 1 \"prelude.metal\"\n" + g.Code +
		"\n#line 1 \"main.cpp\"\n" + hostStubs + "int main() {\n" + body + "\nreturn 0;\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.cpp"), []byte(prog), 0o644); err != nil {
		return "", err
	}
	if err := clang(ctx, dir, "-std=c++20", "-O0", "-fsigned-char", "-w", "main.cpp", "-o", "main"); err != nil {
		return "", fmt.Errorf("harness: compiling the host program: %w", err)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "main")).Output()
	if err != nil {
		return "", fmt.Errorf("harness: running the host program: %w", err)
	}
	return string(out), nil
}

// hostStubs defines the runtime entry points a host program never calls.
const hostStubs = `extern "C" {
void __msl_barrier(const char *, const char *, uint32_t, uint32_t) {}
void __msl_simd_sync(__msl_slot *, __msl_simd_fn, const char *, const char *, uint32_t, uint32_t) {}
void *__msl_tg_alloc(const void *, size_t, size_t) { return nullptr; }
void __msl_fail(const char *) { __builtin_trap(); }
int __msl_fc_register(int, void *, int, bool *) { return 0; }
}
`
