package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/internal/fixtures"
)

type tokenizeCase struct {
	Text            string  `json:"text"`
	IDs             []int32 `json:"ids"`
	IDsParseSpecial []int32 `json:"ids_parse_special"`
}

// vocabularies are the two fixture vocabularies with llama.cpp's tokenizations of them.
var vocabularies = []struct {
	name, gguf, cases string
	nCases            int
}{
	{"tiny-bpe512", "vocab/tiny-bpe512-vocab.gguf", "vocab/tiny-bpe512-tokenize-cases.json", 24},
	{"qwen3", "tokenizer/qwen3-vocab.gguf", "tokenizer/qwen3-tokenize-cases.json", 40},
}

// Loading the Qwen3 vocabulary takes a moment; tests share one copy of each.
var (
	loadOnce sync.Map // path → func() (*Tokenizer, error)
)

func load(t testing.TB, rel string) *Tokenizer {
	t.Helper()
	path := fixtures.Path(t, rel)
	f, _ := loadOnce.LoadOrStore(path, sync.OnceValues(func() (*Tokenizer, error) { return Load(path) }))
	tok, err := f.(func() (*Tokenizer, error))()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func loadCases(t testing.TB, rel string) []tokenizeCase {
	t.Helper()
	raw, err := os.ReadFile(fixtures.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []tokenizeCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	return file.Cases
}

// TestLlamaCppCases checks every fixture case against llama.cpp's ids, with and without
// special-token parsing, and that decoding (whole and streamed) gives back the input bytes.
func TestLlamaCppCases(t *testing.T) {
	for _, v := range vocabularies {
		t.Run(v.name, func(t *testing.T) {
			tok := load(t, v.gguf)
			cases := loadCases(t, v.cases)
			if len(cases) != v.nCases {
				t.Fatalf("%d cases, want %d", len(cases), v.nCases)
			}
			for i, c := range cases {
				if got := tok.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
					t.Errorf("case %d %q parseSpecial=false:\n got %v\nwant %v", i, c.Text, got, c.IDs)
				}
				if got := tok.Encode(c.Text, true); !slices.Equal(got, c.IDsParseSpecial) {
					t.Errorf("case %d %q parseSpecial=true:\n got %v\nwant %v", i, c.Text, got, c.IDsParseSpecial)
				}
				special := DecodeOpts{Special: true}
				for _, ids := range [][]int32{c.IDs, c.IDsParseSpecial} {
					if got := tok.DecodeWith(ids, special); got != c.Text {
						t.Errorf("case %d: decode %v = %q, want %q", i, ids, got, c.Text)
					}
					if got := streamDecode(t, tok, ids, special); got != c.Text {
						t.Errorf("case %d: stream decode %v = %q, want %q", i, ids, got, c.Text)
					}
				}
			}
		})
	}
}

// streamDecode feeds ids one at a time and checks that every chunk is valid UTF-8.
func streamDecode(t *testing.T, tok *Tokenizer, ids []int32, o DecodeOpts) string {
	t.Helper()
	d := tok.NewStreamDecoderWith(o)
	var sb strings.Builder
	for _, id := range ids {
		chunk := d.Next(id)
		if !utf8.ValidString(chunk) {
			t.Errorf("stream chunk %q after token %d is not valid UTF-8", chunk, id)
		}
		sb.WriteString(chunk)
	}
	if rest := d.Flush(); rest != "" {
		t.Errorf("Flush returned %q after complete text", rest)
		sb.WriteString(rest)
	}
	return sb.String()
}

func TestSpecialTokens(t *testing.T) {
	t.Run("tiny-bpe512", func(t *testing.T) {
		tok := load(t, "vocab/tiny-bpe512-vocab.gguf")
		if tok.VocabSize() != 512 || tok.BOS() != 509 || tok.EOS() != 511 || tok.Pad() != 509 || tok.AddBOS() {
			t.Errorf("vocab %d bos %d eos %d pad %d addBOS %v", tok.VocabSize(), tok.BOS(), tok.EOS(), tok.Pad(), tok.AddBOS())
		}
		if got, want := tok.EOG(), []int32{509, 511}; !slices.Equal(got, want) {
			t.Errorf("EOG %v, want %v", got, want)
		}
		if tok.IsEOG(510) || !tok.IsEOG(511) || !tok.IsEOG(509) || tok.IsEOG(0) {
			t.Error("IsEOG wrong for 509..511")
		}
	})
	t.Run("qwen3", func(t *testing.T) {
		tok := load(t, "tokenizer/qwen3-vocab.gguf")
		if tok.VocabSize() != 151936 || tok.BOS() != 151643 || tok.EOS() != 151645 || tok.AddBOS() {
			t.Errorf("vocab %d bos %d eos %d addBOS %v", tok.VocabSize(), tok.BOS(), tok.EOS(), tok.AddBOS())
		}
		// llama.cpp (d32676d7, its log "printing all EOG tokens"): <|endoftext|>, <|im_end|>,
		// the FIM pad, repo-name and file-separator tokens, and "</s>" — an ordinary BPE token
		// in Qwen3 that llama.cpp's text list (added for PaddleOCR) turns into a CONTROL token.
		if got, want := tok.EOG(), []int32{128247, 151643, 151645, 151662, 151663, 151664}; !slices.Equal(got, want) {
			t.Errorf("EOG %v, want %v", got, want)
		}
		if id, ok := tok.TokenID("<think>"); !ok || id != 151667 || tok.Type(id) != TypeUserDefined {
			t.Errorf("<think> = %d %v %v", id, ok, tok.Type(id))
		}
		if tok.Token(151644) != "<|im_start|>" || tok.Type(151644) != TypeControl || tok.Type(151900) != TypeUnused {
			t.Errorf("token 151644 %q %v, 151900 %v", tok.Token(151644), tok.Type(151644), tok.Type(151900))
		}
		if tok.Token(-1) != "" || tok.Token(1<<30) != "" {
			t.Error("Token out of range is not empty")
		}
	})
}

func TestDecodeSpecial(t *testing.T) {
	tok := load(t, "tokenizer/qwen3-vocab.gguf")
	// <|im_start|>user\nhi<|im_end|> then <think> (USER_DEFINED) and a [PAD] filler (UNUSED).
	ids := append(tok.Encode("<|im_start|>user\nhi<|im_end|><think>", true), 151900)
	if got, want := tok.Decode(ids), "user\nhi<think>"; got != want {
		t.Errorf("Decode = %q, want %q", got, want)
	}
	if got, want := tok.DecodeWith(ids, DecodeOpts{Special: true}), "<|im_start|>user\nhi<|im_end|><think>"; got != want {
		t.Errorf("Decode special = %q, want %q", got, want)
	}
	if got := tok.Decode([]int32{-5, 1 << 30}); got != "" {
		t.Errorf("out-of-range ids decode to %q", got)
	}
}

// TestEndOfSentenceText: llama.cpp makes Qwen3's ordinary "</s>" token a CONTROL token, so
// its text is matched only with parseSpecial (ids from llama-tokenize at d32676d7).
func TestEndOfSentenceText(t *testing.T) {
	tok := load(t, "tokenizer/qwen3-vocab.gguf")
	in := "<s>x</s> a</s>"
	if got, want := tok.Encode(in, true), []int32{44047, 28257, 128247, 264, 128247}; !slices.Equal(got, want) {
		t.Errorf("parse special: %v, want %v", got, want)
	}
	if got, want := tok.Encode(in, false), []int32{44047, 28257, 522, 82, 29, 264, 522, 82, 29}; !slices.Equal(got, want) {
		t.Errorf("no parse special: %v, want %v", got, want)
	}
}

func TestStreamDecoderHoldsPartialCharacters(t *testing.T) {
	tok := load(t, "vocab/tiny-bpe512-vocab.gguf")
	// Byte tokens of "é🦙": C3 A9 F0 9F A6 99, fed one byte token at a time.
	var ids []int32
	for _, b := range []byte("é🦙") {
		ids = append(ids, tok.byteTok[b])
	}
	d := tok.NewStreamDecoder()
	var got []string
	for _, id := range ids {
		got = append(got, d.Next(id))
	}
	if want := []string{"", "é", "", "", "", "🦙"}; !slices.Equal(got, want) {
		t.Errorf("chunks %q, want %q", got, want)
	}
	// A character cut short by the end of the stream, and a byte that never starts one.
	d.Next(tok.byteTok[0xF0])
	d.Next(tok.byteTok[0x9F])
	if rest := d.Flush(); rest != "\uFFFD\uFFFD" {
		t.Errorf("Flush of a cut character = %q", rest)
	}
	if got := d.Next(tok.byteTok[0xFF]) + d.Next(tok.byteTok['a']); got != "\uFFFDa" {
		t.Errorf("invalid byte then 'a' = %q", got)
	}
}

func TestInvalidUTF8(t *testing.T) {
	tok := load(t, "tokenizer/qwen3-vocab.gguf")
	// Each invalid byte becomes U+FFFD before splitting, as in llama.cpp.
	in := "a\xffb\xe4\xbdc"
	if got, want := tok.Decode(tok.Encode(in, false)), "a\uFFFDb\uFFFD\uFFFDc"; got != want {
		t.Errorf("round trip of %q = %q, want %q", in, got, want)
	}
}

// TestFixtureModels loads the tokenizer from a full model file: it carries the tiny-bpe512
// vocabulary.
func TestFixtureModels(t *testing.T) {
	want := load(t, "vocab/tiny-bpe512-vocab.gguf")
	cases := loadCases(t, "vocab/tiny-bpe512-tokenize-cases.json")
	for _, name := range []string{"tiny-qwen3-F32.gguf", "tiny-qwen3next-Q8_0.gguf"} {
		t.Run(name, func(t *testing.T) {
			tok, err := Load(fixtures.Path(t, "models", name))
			if err != nil {
				t.Fatal(err)
			}
			if tok.VocabSize() != want.VocabSize() || tok.EOS() != want.EOS() || !slices.Equal(tok.EOG(), want.EOG()) {
				t.Errorf("vocab %d eos %d eog %v", tok.VocabSize(), tok.EOS(), tok.EOG())
			}
			for _, c := range cases {
				if got := tok.Encode(c.Text, true); !slices.Equal(got, c.IDsParseSpecial) {
					t.Errorf("%q: got %v, want %v", c.Text, got, c.IDsParseSpecial)
				}
			}
		})
	}
}

// TestBadMetadata checks that each kind of broken vocabulary gives an error naming the key.
func TestBadMetadata(t *testing.T) {
	base := func() map[string]any {
		tokens := make([]string, 0, 260)
		for b := range 256 {
			tokens = append(tokens, byteChars[b])
		}
		tokens = append(tokens, "Ġt", "he", "<|im_end|>", "x")
		return map[string]any{
			keyModel:  "gpt2",
			keyPre:    "qwen2",
			keyTokens: tokens,
			keyTypes:  append(make([]int32, 256), 1, 1, 3, 1),
			keyMerges: []string{"Ġ t", "h e"},
			keyEOS:    uint32(258),
		}
	}
	open := func(t *testing.T, kv map[string]any) (*Tokenizer, error) {
		t.Helper()
		if types, ok := kv[keyTypes].([]int32); ok && len(types) >= 256 {
			for i := range 256 {
				if types[i] == 0 {
					types[i] = 1
				}
			}
		}
		w := gguf.NewWriter()
		for _, k := range slices.Sorted(mapKeys(kv)) {
			if kv[k] != nil {
				w.Set(k, kv[k])
			}
		}
		path := filepath.Join(t.TempDir(), "v.gguf")
		fh, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteTo(fh); err != nil {
			t.Fatal(err)
		}
		fh.Close()
		return Load(path)
	}
	t.Run("Good", func(t *testing.T) {
		tok, err := open(t, base())
		if err != nil {
			t.Fatal(err)
		}
		if got, want := tok.Encode(" the", false), []int32{256, 257}; !slices.Equal(got, want) {
			t.Errorf("Encode = %v, want %v", got, want)
		}
		if !slices.Equal(tok.EOG(), []int32{258}) || tok.BOS() != -1 {
			t.Errorf("EOG %v BOS %d", tok.EOG(), tok.BOS())
		}
	})
	cases := []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"SPM", func(m map[string]any) { m[keyModel] = "llama" }, `tokenizer.ggml.model is "llama"`},
		{"NoModel", func(m map[string]any) { m[keyModel] = nil }, `"tokenizer.ggml.model" is missing`},
		{"UnknownPre", func(m map[string]any) { m[keyPre] = "llama-bpe" }, `pre-tokenizer "llama-bpe" (tokenizer.ggml.pre) is not supported; supported: deepseek-r1-qwen, qwen2`},
		{"NoPre", func(m map[string]any) { m[keyPre] = nil }, `"tokenizer.ggml.pre" is missing`},
		{"NoTokens", func(m map[string]any) { m[keyTokens] = nil }, `"tokenizer.ggml.tokens" is missing`},
		{"EmptyTokens", func(m map[string]any) { m[keyTokens] = []string{} }, `tokenizer.ggml.tokens is empty`},
		{"ShortTypes", func(m map[string]any) { m[keyTypes] = []int32{1, 1} }, `token_type has 2 entries for 260 tokens`},
		{"NoMerges", func(m map[string]any) { m[keyMerges] = nil }, `"tokenizer.ggml.merges" is missing`},
		{"BadMerge", func(m map[string]any) { m[keyMerges] = []string{"Ġ t", "he"} }, `tokenizer.ggml.merges[1] = "he" has no space`},
		{"EOSOutOfRange", func(m map[string]any) { m[keyEOS] = uint32(999) }, `eos_token_id = 999 is outside the vocabulary of 260 tokens`},
		{"AddBOSWithoutBOS", func(m map[string]any) { m[keyAddBOS] = true }, `add_bos_token is true but tokenizer.ggml.bos_token_id is missing`},
		{"WrongType", func(m map[string]any) { m[keyEOS] = "x" }, `"tokenizer.ggml.eos_token_id" is string, want integer`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kv := base()
			c.edit(kv)
			_, err := open(t, kv)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestConcurrentEncode shares one tokenizer (and its word cache) between goroutines; run it
// with -race.
func TestConcurrentEncode(t *testing.T) {
	tok := load(t, "tokenizer/qwen3-vocab.gguf")
	cases := loadCases(t, "tokenizer/qwen3-tokenize-cases.json")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				c := cases[(g+i)%len(cases)]
				if got := tok.Encode(c.Text, true); !slices.Equal(got, c.IDsParseSpecial) {
					t.Errorf("goroutine %d: %q = %v", g, c.Text, got)
					return
				}
			}
		})
	}
	wg.Wait()
}
