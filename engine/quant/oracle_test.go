package quant

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/ggml holds blocks of random bytes dequantized by ggml itself (see its README).
func TestDequantizeMatchesGGMLRandomBlocks(t *testing.T) {
	raws, err := filepath.Glob("testdata/ggml/*.raw.bin")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[Type]bool{}
	for _, raw := range raws {
		stem := strings.TrimSuffix(filepath.Base(raw), ".raw.bin")
		t.Run(stem, func(t *testing.T) {
			typ, err := ParseType(strings.TrimSuffix(stem, "-all"))
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(raw)
			if err != nil {
				t.Fatal(err)
			}
			want := readFloats(t, strings.TrimSuffix(raw, ".raw.bin")+".f32.bin")
			checkBitIdentical(t, typ, b, want)
			seen[typ] = true
		})
	}
	for typ := range decoders {
		if typ != F32 && !seen[typ] {
			t.Errorf("no ggml oracle data for supported type %v", typ)
		}
	}
}

func TestF16ToF32AllValues(t *testing.T) {
	raw, err := os.ReadFile("testdata/ggml/f16-all.raw.bin")
	if err != nil {
		t.Fatal(err)
	}
	want := readFloats(t, "testdata/ggml/f16-all.f32.bin")
	for i := range want {
		h := binary.LittleEndian.Uint16(raw[2*i:])
		if got := F16ToF32(h); math.Float32bits(got) != math.Float32bits(want[i]) {
			t.Errorf("F16ToF32(%#04x) = %#08x, ggml %#08x", h, math.Float32bits(got), math.Float32bits(want[i]))
		}
	}
	// The slice form (VCVTPH2PS where the CPU has it) gives the same bits, in runs of every
	// length around its 32-value step.
	halves := make([]uint16, len(want))
	for i := range halves {
		halves[i] = binary.LittleEndian.Uint16(raw[2*i:])
	}
	for start, n := 0, 1; start < len(halves); start, n = start+n, n%67+1 {
		n := min(n, len(halves)-start)
		got := make([]float32, n)
		F16ToF32Slice(got, halves[start:start+n])
		for i, g := range got {
			if math.Float32bits(g) != math.Float32bits(want[start+i]) {
				t.Fatalf("F16ToF32Slice at %#04x = %#08x, ggml %#08x", halves[start+i], math.Float32bits(g), math.Float32bits(want[start+i]))
			}
		}
	}
}

func TestNarrowingMatchesGGML(t *testing.T) {
	f := readFloats(t, "testdata/ggml/f32-narrow.f32.bin")
	h, err := os.ReadFile("testdata/ggml/f32-narrow.f16.bin")
	if err != nil {
		t.Fatal(err)
	}
	bh, err := os.ReadFile("testdata/ggml/f32-narrow.bf16.bin")
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range f {
		if got, want := F32ToF16(v), binary.LittleEndian.Uint16(h[2*i:]); got != want {
			t.Errorf("F32ToF16(%g = %#08x) = %#04x, ggml %#04x", v, math.Float32bits(v), got, want)
		}
		if got, want := F32ToBF16(v), binary.LittleEndian.Uint16(bh[2*i:]); got != want {
			t.Errorf("F32ToBF16(%g = %#08x) = %#04x, ggml %#04x", v, math.Float32bits(v), got, want)
		}
	}
}

func TestHalfRoundTrip(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		if b := BF16ToF32(h); b == b {
			if g := F32ToBF16(b); g != h {
				t.Errorf("F32ToBF16(BF16ToF32(%#04x)) = %#04x", h, g)
			}
		}
		f := F16ToF32(h)
		if f != f {
			if g := F32ToF16(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Errorf("NaN %#04x came back as %#04x", h, g)
			}
			continue
		}
		if g := F32ToF16(f); g != h {
			t.Errorf("F32ToF16(F16ToF32(%#04x)) = %#04x", h, g)
		}
	}
}
