// Command insncount counts the instructions the assembly kernels of engine/quant and
// engine/cpu execute per 256 weights (and per weight byte), or per multiply-add for the
// GEMM micro-kernels, from the inner loops as the Go assembler expands them. It is the
// figure engine/README.md compares arm64 NEON with amd64 AVX2/AVX-512 by, since arm64 speed
// cannot be measured on the x86 machines this project is built on.
//
//	go run ./internal/insncount        (from the repository root)
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// segment is a stretch of a kernel's source executed mult times per loop iteration: from
// the line that reads from through the first line after it that reads to (whitespace
// collapsed), both inside function fn.
type segment struct {
	from, to string
	mult     int
}

// kernel names one loop: per iteration it handles values weights in bytes bytes (for
// GEMM: values multiply-adds, bytes 0).
type kernel struct {
	what, arch, file, fn string
	values, bytes        int
	segs                 []segment
}

func loop(label, branch string) []segment { return []segment{{label + ":", branch + " " + label, 1}} }

var kernels = []kernel{
	{"Q8_0", "arm64", "engine/quant/dot_arm64.s", "dotQ8_0RowsNEON", 32, 34, loop("q80block", "BNE")},
	{"Q8_0", "amd64 AVX2", "engine/quant/dot_amd64.s", "dotQ8_0AVX2", 64, 68, loop("loop2", "JNZ")},
	{"Q8_0", "amd64 AVX-512", "engine/quant/dot_avx512_amd64.s", "dotQ8_0RowsAVX512", 128, 136, loop("loop4", "JGE")},
	// Four tokens per call (DotRows4): per weight and byte of each token's product.
	{"Q8_0, 4 tokens", "arm64", "engine/quant/dot_arm64.s", "dotQ8_0Rows4NEON", 4 * 32, 4 * 34, loop("q80x4block", "BNE")},
	{"Q8_0, 4 tokens", "amd64 AVX-512", "engine/quant/dot_avx512_amd64.s", "dotQ8_0Rows4AVX512", 4 * 128, 4 * 136, loop("loop4x4", "JGE")},
	{"Q4_K", "arm64", "engine/quant/dot_arm64.s", "dotQ4_KRowsNEON", 256, 144, loop("q4kblock", "BNE")},
	{"Q4_K, 4 tokens", "arm64", "engine/quant/dot_arm64.s", "dotQ4_KRows4NEON", 4 * 256, 4 * 144, loop("q4x4block", "BNE")},
	{"Q4_K", "amd64 AVX2", "engine/quant/dot_amd64.s", "dotQ4_KAVX2", 256, 144, []segment{
		{"block:", "LEAQ 16(SI), R11", 1}, {"chunk:", "JLT chunk", 4}, {"ADDQ $144, SI", "JNZ block", 1}}},
	// The scales of a group of blocks are unpacked once per group (first/ahead loops, one
	// KSCALES512 per block): counted once per block.
	{"Q4_K", "amd64 AVX-512", "engine/quant/dot_avx512_amd64.s", "dotQ4_KRowsAVX512", 256, 144, []segment{
		{"ahead:", "JNZ ahead", 1}, {"block:", "JNZ block", 1}}},
	{"Q6_K", "arm64", "engine/quant/dot_arm64.s", "dotQ6_KRowsNEON", 256, 210, loop("q6kblock", "BNE")},
	{"Q6_K, 4 tokens", "arm64", "engine/quant/dot_arm64.s", "dotQ6_KRows4NEON", 4 * 256, 4 * 210, loop("q6x4block", "BNE")},
	{"Q6_K", "amd64 AVX2", "engine/quant/dot_amd64.s", "dotQ6_KAVX2", 256, 210, loop("block", "JNZ")},
	// Per block: the next block's scales, the block, and the loop branch (the row's
	// epilogue between JNZ next and next: runs once per row).
	{"Q6_K", "amd64 AVX-512", "engine/quant/dot_avx512_amd64.s", "dotQ6_KRowsAVX512", 256, 210, []segment{
		{"block:", "JNZ next", 1}, {"next:", "JNZ block", 1}}},
	{"IQ2_XXS", "arm64", "engine/quant/dot_arm64.s", "dotIQ2_XXSRowsNEON", 256, 66, loop("iq2block", "BNE")},
	{"IQ2_XXS", "amd64 AVX2", "engine/quant/dot_amd64.s", "dotIQ2_XXSAVX2", 256, 66, []segment{
		{"block:", "XORQ R10, R10", 1}, {"sub:", "JLT sub", 8}, {"VFMADD231PS Y8, Y5, Y0", "JNZ block", 1}}},
	{"f32 GEMM 8×8, 4 k/iteration", "arm64", "engine/cpu/gemm_arm64.s", "gemm8x8NEON", 8 * 8 * 4, 0, loop("loop4", "BNE")},
	{"f32 GEMM 6×16", "amd64 AVX2", "engine/cpu/gemm_amd64.s", "gemm6x16AVX2", 6 * 16, 0, loop("loop", "JNZ")},
	{"f32 GEMM 12×32", "amd64 AVX-512", "engine/cpu/gemm_amd64.s", "gemm12x32AVX512", 12 * 32, 0, loop("loop", "JNZ")},
}

func main() {
	fmt.Println("| kernel | ISA | instructions per loop iteration | per 256 weights | per weight byte |")
	fmt.Println("|---|---|---:|---:|---:|")
	for _, k := range kernels {
		n, err := count(".", k)
		if err != nil {
			fmt.Fprintln(os.Stderr, "insncount:", err)
			os.Exit(1)
		}
		if k.bytes == 0 {
			fmt.Printf("| %s | %s | %d | %.3f per multiply-add | |\n", k.what, k.arch, n, float64(n)/float64(k.values))
			continue
		}
		fmt.Printf("| %s | %s | %d | %.0f | %.2f |\n", k.what, k.arch, n,
			float64(n)*256/float64(k.values), float64(n)/float64(k.bytes))
	}
}

var asmLine = regexp.MustCompile(`^\s+0x[0-9a-f]+ \d+ \(([^:]+):(\d+)\)\s+(\S+)`)

// count assembles k's file with go tool asm -S and counts the instructions of k.segs.
func count(root string, k kernel) (int, error) {
	src, err := os.ReadFile(filepath.Join(root, k.file))
	if err != nil {
		return 0, err
	}
	lines := strings.Split(string(src), "\n")
	start, end := -1, len(lines)
	for i, l := range lines {
		if strings.HasPrefix(l, "TEXT ") {
			if strings.Contains(l, "·"+k.fn+"(SB)") {
				start = i
			} else if start >= 0 && i > start {
				end = i
				break
			}
		}
	}
	if start < 0 {
		return 0, fmt.Errorf("%s: no TEXT %s", k.file, k.fn)
	}
	type span struct{ lo, hi, mult int } // 1-based source lines, inclusive
	var spans []span
	for _, s := range k.segs {
		lo, hi := -1, -1
		for i := start; i < end; i++ {
			f := strings.Join(strings.Fields(lines[i]), " ")
			if lo < 0 && f == s.from {
				lo = i
			}
			if lo >= 0 && strings.HasPrefix(f, s.to) {
				hi = i
				break
			}
		}
		if lo < 0 || hi < 0 {
			return 0, fmt.Errorf("%s %s: no stretch %q … %q", k.file, k.fn, s.from, s.to)
		}
		spans = append(spans, span{lo + 1, hi + 1, s.mult})
	}
	arch := strings.Fields(k.arch)[0]
	out, err := assemble(root, k.file, arch)
	if err != nil {
		return 0, err
	}
	base := filepath.Base(k.file)
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := asmLine.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != base || m[3] == "TEXT" || m[3] == "PCDATA" || m[3] == "FUNCDATA" {
			continue
		}
		line, _ := strconv.Atoi(m[2])
		for _, s := range spans {
			if s.lo <= line && line <= s.hi {
				n += s.mult
			}
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("%s %s: no instructions counted", k.file, k.fn)
	}
	return n, nil
}

var asmCache = map[string][]byte{}

// assemble returns go tool asm -S's listing of file for arch.
func assemble(root, file, arch string) ([]byte, error) {
	if out, ok := asmCache[arch+file]; ok {
		return out, nil
	}
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOROOT: %w", err)
	}
	goroot := strings.TrimSpace(string(out))
	tmp, err := os.CreateTemp("", "insncount-*.o")
	if err != nil {
		return nil, err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command("go", "tool", "asm", "-S", "-p", "x", "-I", filepath.Join(goroot, "pkg", "include"),
		"-o", tmp.Name(), filepath.Base(file))
	cmd.Dir = filepath.Join(root, filepath.Dir(file))
	cmd.Env = append(os.Environ(), "GOARCH="+arch, "GOOS=linux")
	out, err = cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go tool asm %s (%s): %v\n%s", file, arch, err, out)
	}
	asmCache[arch+file] = out
	return out, nil
}
