package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/redlite/batch/internal/fixtures"
)

// licenseText is a long realistic document: the Debian license texts concatenated (about
// 240 KB of English prose with headings, lists and indentation).
func licenseText(b testing.TB) string {
	const dir = "/usr/share/common-licenses"
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Skipf("no license texts: %v", err)
	}
	var sb strings.Builder
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue // symlinks repeat other files
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			b.Fatal(err)
		}
		sb.Write(data)
	}
	if sb.Len() < 100_000 {
		b.Skipf("license texts are only %d bytes", sb.Len())
	}
	return sb.String()
}

// BenchmarkEncode tokenizes the license texts with the Qwen3 vocabulary (word cache warm
// after the first iteration, as it is for a long document's repeated words).
func BenchmarkEncode(b *testing.B) {
	tok := load(b, "tokenizer/qwen3-vocab.gguf")
	text := licenseText(b)
	b.SetBytes(int64(len(text)))
	var n int
	for b.Loop() {
		n = len(tok.Encode(text, false))
	}
	b.ReportMetric(float64(n), "tokens")
}

// BenchmarkEncodeColdCache is BenchmarkEncode with the word cache emptied before each run:
// the cost of a document whose words were never seen.
func BenchmarkEncodeColdCache(b *testing.B) {
	tok := load(b, "tokenizer/qwen3-vocab.gguf")
	text := licenseText(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.cache.init()
		tok.Encode(text, false)
	}
}

func BenchmarkDecode(b *testing.B) {
	tok := load(b, "tokenizer/qwen3-vocab.gguf")
	text := licenseText(b)
	ids := tok.Encode(text, false)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Decode(ids)
	}
}

func BenchmarkLoadQwen3(b *testing.B) {
	path := fixtures.Path(b, "tokenizer", "qwen3-vocab.gguf")
	for b.Loop() {
		if _, err := Load(path); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLongDocument checks that a whole license corpus round-trips and that its tokenization
// does not depend on the state of the word cache.
func TestLongDocument(t *testing.T) {
	tok := load(t, "tokenizer/qwen3-vocab.gguf")
	text := licenseText(t)
	tok.cache.init()
	cold := tok.Encode(text, false)
	if got := tok.Decode(cold); got != text {
		t.Fatal("license texts do not round-trip")
	}
	if warm := tok.Encode(text, false); !slices.Equal(warm, cold) {
		t.Fatal("tokenization depends on the word cache")
	}
	st := &bpeState{}
	splitQwen2(text, func(w string) {
		if ids, ok := tok.cache.get(w); ok && !slices.Equal(ids, tok.merge(st, w, nil)) {
			t.Fatalf("cached ids of %q differ from merging it", w)
		}
	})
}

// FuzzEncode: Encode never panics, and decoding gives back the input (with invalid UTF-8
// bytes replaced by U+FFFD), with and without special-token parsing.
func FuzzEncode(f *testing.F) {
	tok := load(f, "vocab/tiny-bpe512-vocab.gguf")
	for _, c := range loadCases(f, "vocab/tiny-bpe512-tokenize-cases.json") {
		f.Add(c.Text)
	}
	f.Add("it's<|im_end|>\r\n\r\n  x\xff\xe4\xbd")
	f.Fuzz(func(t *testing.T, s string) {
		want := s
		if !utf8.ValidString(s) {
			want = validUTF8(s)
		}
		if got := tok.Decode(tok.Encode(s, false)); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q", s, got)
		}
		if got := tok.DecodeWith(tok.Encode(s, true), DecodeOpts{Special: true}); got != want {
			t.Fatalf("parse special: Decode(Encode(%q)) = %q", s, got)
		}
	})
}
