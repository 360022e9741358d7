package synth

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/redlite/batch/engine/gguf"
)

// vocabulary is the tokenizer.* metadata of a model, in file order, and its token count.
type vocabulary struct {
	kv []gguf.KV
	n  int
}

func (v *vocabulary) set(key string, val any) {
	v.kv = append(v.kv, gguf.KV{Key: key, Value: gguf.NewValue(val)})
}

// Token types as numbered in GGUF (llama_token_type).
const (
	tokenNormal  int32 = 1
	tokenControl int32 = 3
)

// The fixtures' 512-token vocabulary (fixtures/vocab/tiny-bpe512.json) and the minimal
// ChatML template the fixture models carry.
var (
	//go:embed vocab/tiny-bpe512.json
	tinyBPE512 []byte
	//go:embed vocab/chatml.jinja
	chatMLTemplate string
)

// Qwen3-instruct special tokens, as the fixtures and Qwen's own files use them.
const (
	tokEndOfText = "<|endoftext|>"
	tokImStart   = "<|im_start|>"
	tokImEnd     = "<|im_end|>"
)

// qwenTokenizer writes a byte-level BPE vocabulary with Qwen's conventions: gpt2 model, qwen2
// pre-tokenizer, bos = pad = <|endoftext|>, eos = <|im_end|>, no BOS added.
func qwenTokenizer(tokens []string, types []int32, merges []string) (*vocabulary, error) {
	index := map[string]int{}
	for i, t := range tokens {
		index[t] = i
	}
	eot, ok1 := index[tokEndOfText]
	eos, ok2 := index[tokImEnd]
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("synth: vocabulary lacks %s or %s", tokEndOfText, tokImEnd)
	}
	v := &vocabulary{n: len(tokens)}
	v.set("tokenizer.ggml.model", "gpt2")
	v.set("tokenizer.ggml.pre", "qwen2")
	v.set("tokenizer.ggml.tokens", tokens)
	v.set("tokenizer.ggml.token_type", types)
	v.set("tokenizer.ggml.merges", merges)
	v.set("tokenizer.ggml.bos_token_id", uint32(eot))
	v.set("tokenizer.ggml.eos_token_id", uint32(eos))
	v.set("tokenizer.ggml.padding_token_id", uint32(eot))
	v.set("tokenizer.ggml.add_bos_token", false)
	v.set("tokenizer.chat_template", chatMLTemplate)
	return v, nil
}

// tinyVocab is the fixtures' tiny-bpe512 vocabulary.
func tinyVocab() (*vocabulary, error) {
	var j struct {
		Tokens     []string `json:"tokens"`
		TokenTypes []int32  `json:"token_types"`
		Merges     []string `json:"merges"`
	}
	if err := json.Unmarshal(tinyBPE512, &j); err != nil {
		return nil, fmt.Errorf("synth: embedded tiny-bpe512.json: %w", err)
	}
	if len(j.Tokens) != len(j.TokenTypes) {
		return nil, fmt.Errorf("synth: embedded tiny-bpe512.json: %d tokens but %d token types", len(j.Tokens), len(j.TokenTypes))
	}
	return qwenTokenizer(j.Tokens, j.TokenTypes, j.Merges)
}

// vocabFromGGUF copies every tokenizer.* key of f.
func vocabFromGGUF(f *gguf.File) (*vocabulary, error) {
	v := &vocabulary{}
	for _, kv := range f.KV {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			v.kv = append(v.kv, kv)
		}
	}
	tokens, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return nil, fmt.Errorf("synth: vocabulary file %s: %w", f.Path, err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("synth: vocabulary file %s: tokenizer.ggml.tokens is empty", f.Path)
	}
	v.n = len(tokens)
	return v, nil
}

// byteTokens returns the 256 byte tokens in GPT-2's order: the bytes that are printable as
// themselves ('!'..'~', '¡'..'¬', '®'..'ÿ') first, then the others (0x00-0x20, 0x7f-0xa0,
// 0xad) mapped in byte order to U+0100 onwards ('Ā', 'ā', ... 'Ġ' for the space).
func byteTokens() []string {
	var toks []string
	printable := func(b int) bool {
		return b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae && b <= 0xff
	}
	for b := range 256 {
		if printable(b) {
			toks = append(toks, string(rune(b)))
		}
	}
	next := rune(256)
	for b := range 256 {
		if !printable(b) {
			toks = append(toks, string(next))
			next++
		}
	}
	return toks
}

// mergeAlphabet orders the byte tokens for the generated merges, most useful first: the
// space marker and lower-case letters by English frequency, then newline, upper case,
// digits and punctuation; every other byte token follows in id order.
const mergeAlphabet = "ĠetaoinshrdlcumwfgypbvkjxqzĊETAOINSHRDLCUMWFGYPBVKJXQZ0123456789,.-'\"():;!?/"

// generatedVocab builds a valid byte-level BPE vocabulary of n tokens: the 256 byte tokens,
// n-259 tokens each made by one merge of two earlier tokens (all two-character strings
// over the byte alphabet, then three-character ones), and the three control tokens
// <|endoftext|>, <|im_start|>, <|im_end|> last. It tokenizes any text; it is not trained.
func generatedVocab(n int) (*vocabulary, error) {
	const alphabet, controls = 256, 3
	nMerged := n - alphabet - controls
	if nMerged < 0 {
		return nil, fmt.Errorf("synth: a generated vocabulary needs at least %d tokens, got %d", alphabet+controls, n)
	}
	bytes := byteTokens()
	seen := map[string]bool{}
	var order []string // byte tokens in merge order
	for _, r := range mergeAlphabet {
		if s := string(r); !seen[s] {
			seen[s] = true
			order = append(order, s)
		}
	}
	for _, s := range bytes {
		if !seen[s] {
			seen[s] = true
			order = append(order, s)
		}
	}
	tokens := append(make([]string, 0, n), bytes...)
	merges := make([]string, 0, nMerged)
	add := func(a, b string) bool {
		if len(merges) == nMerged {
			return false
		}
		tokens = append(tokens, a+b)
		merges = append(merges, a+" "+b)
		return true
	}
	func() {
		// Pairs by the sum of their ranks, so pairs of frequent characters rank first.
		var pairs []string
		for sum := 0; sum <= 2*(alphabet-1); sum++ {
			for i := max(0, sum-alphabet+1); i <= min(sum, alphabet-1); i++ {
				a, b := order[i], order[sum-i]
				pairs = append(pairs, a+b)
				if !add(a, b) {
					return
				}
			}
		}
		// Then each pair extended by one of the 64 most useful characters.
		for _, p := range pairs {
			for _, c := range order[:64] {
				if !add(p, c) {
					return
				}
			}
		}
	}()
	if len(merges) < nMerged {
		return nil, fmt.Errorf("synth: a generated vocabulary holds at most %d tokens, got %d", len(tokens)+controls, n)
	}
	tokens = append(tokens, tokEndOfText, tokImStart, tokImEnd)
	types := make([]int32, len(tokens))
	for i := range types {
		types[i] = tokenNormal
	}
	for i := len(types) - controls; i < len(types); i++ {
		types[i] = tokenControl
	}
	return qwenTokenizer(tokens, types, merges)
}
