// Package tokenizer is the byte-level BPE tokenizer of GPT-2 / Qwen models, built from a GGUF
// file's tokenizer.ggml.* metadata. Its aim is to give exactly the ids llama.cpp gives: the
// same special-token partitioning, the same Qwen2 pre-tokenizer split, the same merge order,
// the same end-of-generation set and the same detokenization.
//
// Text is not normalized (llama.cpp applies no NFC either). Invalid UTF-8 in the input is
// replaced by U+FFFD, one per invalid byte, before pre-tokenization, as llama.cpp does.
package tokenizer

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/redlite/batch/engine/gguf"
)

// TokenType is the tokenizer.ggml.token_type of a token.
type TokenType int32

// Token types, numbered as in GGUF.
const (
	TypeUndefined   TokenType = 0
	TypeNormal      TokenType = 1
	TypeUnknown     TokenType = 2
	TypeControl     TokenType = 3
	TypeUserDefined TokenType = 4
	TypeUnused      TokenType = 5
	TypeByte        TokenType = 6
)

var typeNames = [...]string{"UNDEFINED", "NORMAL", "UNKNOWN", "CONTROL", "USER_DEFINED", "UNUSED", "BYTE"}

func (t TokenType) String() string {
	if t >= 0 && int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("TokenType(%d)", int32(t))
}

// Pre-tokenizers (tokenizer.ggml.pre) we implement. Each name maps to the splitter llama.cpp
// uses for it; all of these also keep spaces as they are when decoding.
var preTokenizers = map[string]bool{
	"qwen2":            true,
	"deepseek-r1-qwen": true, // Qwen2 vocabulary, same regex
}

// Tokenizer encodes text to token ids and back. It is safe for concurrent use.
type Tokenizer struct {
	tokens []string
	types  []TokenType
	pieces []string         // what each token decodes to (CONTROL text included; Decode filters)
	ids    map[string]int32 // token text → id; the last of duplicate texts wins, as in llama.cpp

	// BPE symbols are token ids, plus ids from len(tokens) on for merge parts and results
	// that are not tokens themselves (symText holds their text).
	symText []string
	merges  map[uint64]merge
	byteSym [256]int32 // initial symbol of each input byte
	byteTok [256]int32 // token of each byte for symbols that are not tokens, -1 if none

	specials []int32 // CONTROL, USER_DEFINED and UNKNOWN tokens, longest text first

	pre            string
	bos, eos, pad  int32
	addBOS, addEOS bool
	eog            []int32

	cache wordCache
}

type merge struct {
	rank   int32
	result int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// Load opens the GGUF file at path and builds its tokenizer.
func Load(path string) (*Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	return FromGGUF(f)
}

// Metadata keys read by FromGGUF.
const (
	keyModel     = "tokenizer.ggml.model"
	keyPre       = "tokenizer.ggml.pre"
	keyTokens    = "tokenizer.ggml.tokens"
	keyTypes     = "tokenizer.ggml.token_type"
	keyMerges    = "tokenizer.ggml.merges"
	keyBOS       = "tokenizer.ggml.bos_token_id"
	keyEOS       = "tokenizer.ggml.eos_token_id"
	keyPad       = "tokenizer.ggml.padding_token_id"
	keyEOT       = "tokenizer.ggml.eot_token_id"
	keyEOM       = "tokenizer.ggml.eom_token_id"
	keyFIMPre    = "tokenizer.ggml.fim_pre_token_id"
	keyFIMSuf    = "tokenizer.ggml.fim_suf_token_id"
	keyFIMMid    = "tokenizer.ggml.fim_mid_token_id"
	keyFIMPad    = "tokenizer.ggml.fim_pad_token_id"
	keyFIMRep    = "tokenizer.ggml.fim_rep_token_id"
	keyFIMSep    = "tokenizer.ggml.fim_sep_token_id"
	keyAddBOS    = "tokenizer.ggml.add_bos_token"
	keyAddEOS    = "tokenizer.ggml.add_eos_token"
	maxVocabSize = 1 << 24 // far above any real vocabulary; keeps symbol ids in int32
)

// FromGGUF builds the tokenizer described by f's tokenizer.ggml.* metadata. The result does
// not refer to f, which may be closed afterwards.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	model, err := f.String(keyModel)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if model != "gpt2" {
		return nil, fmt.Errorf("tokenizer: %s is %q; only \"gpt2\" (byte-level BPE) is supported", keyModel, model)
	}
	pre, err := f.String(keyPre)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if !preTokenizers[pre] {
		return nil, fmt.Errorf("tokenizer: pre-tokenizer %q (%s) is not supported; supported: %s",
			pre, keyPre, strings.Join(slices.Sorted(maps.Keys(preTokenizers)), ", "))
	}
	tokens, err := f.Strings(keyTokens)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("tokenizer: %s is empty", keyTokens)
	}
	if len(tokens) > maxVocabSize {
		return nil, fmt.Errorf("tokenizer: %s has %d tokens, more than the limit of %d", keyTokens, len(tokens), maxVocabSize)
	}
	types := make([]TokenType, len(tokens))
	if _, ok := f.Get(keyTypes); ok {
		tt, err := f.Ints(keyTypes)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		if len(tt) < len(tokens) {
			return nil, fmt.Errorf("tokenizer: %s has %d entries for %d tokens", keyTypes, len(tt), len(tokens))
		}
		for i := range types {
			types[i] = TokenType(tt[i])
			if tt[i] < 0 || tt[i] > int64(TypeByte) {
				types[i] = TypeUndefined
			}
		}
	} else {
		for i := range types {
			types[i] = TypeNormal
		}
	}
	merges, err := f.Strings(keyMerges)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}

	t := &Tokenizer{tokens: tokens, types: types, pre: pre}
	t.ids = make(map[string]int32, len(tokens))
	for i, s := range tokens {
		if s != "" {
			t.ids[s] = int32(i)
		}
	}
	if err := t.buildMerges(merges); err != nil {
		return nil, err
	}

	if t.bos, err = t.optionalID(f, keyBOS); err != nil {
		return nil, err
	}
	if t.eos, err = t.optionalID(f, keyEOS); err != nil {
		return nil, err
	}
	if t.pad, err = t.optionalID(f, keyPad); err != nil {
		return nil, err
	}
	if t.addBOS, err = f.BoolOr(keyAddBOS, false); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if t.addEOS, err = f.BoolOr(keyAddEOS, false); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if t.addBOS && t.bos < 0 {
		return nil, fmt.Errorf("tokenizer: %s is true but %s is missing", keyAddBOS, keyBOS)
	}
	if t.addEOS && t.eos < 0 {
		return nil, fmt.Errorf("tokenizer: %s is true but %s is missing", keyAddEOS, keyEOS)
	}
	if err := t.findEOG(f); err != nil {
		return nil, err
	}

	// Special tokens are matched in the text before anything else, longest first; ties go
	// to the lower id (llama.cpp leaves them to std::sort).
	for i, typ := range t.types {
		if (typ == TypeControl || typ == TypeUserDefined || typ == TypeUnknown) && tokens[i] != "" {
			t.specials = append(t.specials, int32(i))
		}
	}
	slices.SortStableFunc(t.specials, func(a, b int32) int { return len(tokens[b]) - len(tokens[a]) })

	t.pieces = make([]string, len(tokens))
	for i := range tokens {
		t.pieces[i] = t.piece(int32(i))
	}
	t.cache.init()
	return t, nil
}

// buildMerges turns the "left right" merge list into a table keyed by the symbol pair. Merge
// parts and results that are not tokens get symbol ids of their own, so that a merge chain
// through such an intermediate still works as it does on llama.cpp's strings.
func (t *Tokenizer) buildMerges(merges []string) error {
	n := int32(len(t.tokens))
	extra := map[string]int32{}
	sym := func(s string) int32 {
		if id, ok := t.ids[s]; ok {
			return id
		}
		if id, ok := extra[s]; ok {
			return id
		}
		id := n + int32(len(t.symText))
		extra[s] = id
		t.symText = append(t.symText, s)
		return id
	}
	for b := range 256 {
		t.byteSym[b] = sym(byteChars[b])
		t.byteTok[b] = -1
		if id, ok := t.ids[byteChars[b]]; ok {
			t.byteTok[b] = id
		}
	}
	if len(merges) > maxVocabSize {
		return fmt.Errorf("tokenizer: %s has %d entries, more than the limit of %d", keyMerges, len(merges), maxVocabSize)
	}
	t.merges = make(map[uint64]merge, len(merges))
	for rank, m := range merges {
		// The separator is the first space after the first byte, so a part may start with one.
		sp := -1
		if len(m) > 1 {
			sp = strings.IndexByte(m[1:], ' ')
		}
		if sp < 0 {
			return fmt.Errorf("tokenizer: %s[%d] = %q has no space between its two parts", keyMerges, rank, m)
		}
		left, right := m[:sp+1], m[sp+2:]
		key := pairKey(sym(left), sym(right))
		if _, dup := t.merges[key]; dup {
			continue // llama.cpp keeps the first rank of a repeated pair
		}
		t.merges[key] = merge{rank: int32(rank), result: sym(left + right)}
	}
	return nil
}

func (t *Tokenizer) optionalID(f *gguf.File, key string) (int32, error) {
	id, err := f.IntOr(key, -1)
	if err != nil {
		return -1, fmt.Errorf("tokenizer: %w", err)
	}
	if id < -1 || id >= int64(len(t.tokens)) {
		return -1, fmt.Errorf("tokenizer: %s = %d is outside the vocabulary of %d tokens", key, id, len(t.tokens))
	}
	return int32(id), nil
}

// Texts that mark end-of-generation tokens, as llama.cpp lists them (it has no metadata for
// most of these and goes by the text).
var eogTexts = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
	"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
	"<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
	"<｜end▁of▁sentence｜>", "[e~[",
}

// Tokens llama.cpp finds by key or else by text: the fill-in-the-middle tokens (pad, repo and
// separator also end generation), end of turn and end of message.
var (
	fimPreTexts = []string{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"}
	fimSufTexts = []string{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"}
	fimMidTexts = []string{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"}
	fimPadTexts = []string{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}
	fimRepTexts = []string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}
	fimSepTexts = []string{"<|file_sep|>"}
	eotTexts    = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
		"<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}
	eomTexts = []string{"<|eom_id|>"}
)

// findEOG builds the end-of-generation set the way llama.cpp does: the FIM pad/repo/separator
// tokens, every token whose text is in eogTexts, and the eos, eot and eom tokens. Tokens found
// by their text become CONTROL tokens, as llama.cpp forces them to be. Where llama.cpp picks
// the first of several matching texts in hash order, we pick the lowest id.
func (t *Tokenizer) findEOG(f *gguf.File) error {
	set := map[int32]bool{}
	byKeyOrText := func(key string, texts []string) (int32, error) {
		id, err := t.optionalID(f, key)
		if err != nil || id >= 0 {
			return id, err
		}
		id = t.lowestWithText(texts)
		if id >= 0 {
			t.forceControl(id)
		}
		return id, nil
	}
	for _, k := range []struct {
		key   string
		texts []string
		eog   bool
	}{
		{keyFIMPre, fimPreTexts, false}, {keyFIMSuf, fimSufTexts, false}, {keyFIMMid, fimMidTexts, false},
		{keyFIMPad, fimPadTexts, true}, {keyFIMRep, fimRepTexts, true}, {keyFIMSep, fimSepTexts, true},
		{keyEOT, eotTexts, true}, {keyEOM, eomTexts, true},
	} {
		id, err := byKeyOrText(k.key, k.texts)
		if err != nil {
			return err
		}
		if id >= 0 && k.eog {
			set[id] = true
		}
	}
	for _, s := range eogTexts {
		if id, ok := t.ids[s]; ok {
			set[id] = true
			t.forceControl(id)
		}
	}
	if t.eos >= 0 {
		set[t.eos] = true
	}
	for id := range set {
		t.eog = append(t.eog, id)
	}
	slices.Sort(t.eog)
	return nil
}

func (t *Tokenizer) lowestWithText(texts []string) int32 {
	best := int32(-1)
	for _, s := range texts {
		if id, ok := t.ids[s]; ok && (best < 0 || id < best) {
			best = id
		}
	}
	return best
}

func (t *Tokenizer) forceControl(id int32) {
	if t.types[id] != TypeControl && t.types[id] != TypeUnknown {
		t.types[id] = TypeControl
	}
}

// VocabSize is the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// Token is the text of token id as the vocabulary stores it (byte-level BPE tokens in the
// GPT-2 byte-to-unicode spelling, e.g. "Ġthe"), or "" for an id outside the vocabulary.
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// TokenID looks up a token by its exact text, e.g. "<|im_end|>".
func (t *Tokenizer) TokenID(text string) (int32, bool) {
	id, ok := t.ids[text]
	return id, ok
}

// Type is the type of token id, after llama.cpp's adjustments (end-of-generation tokens found
// by their text are CONTROL).
func (t *Tokenizer) Type(id int32) TokenType {
	if id < 0 || int(id) >= len(t.types) {
		return TypeUndefined
	}
	return t.types[id]
}

// BOS is the beginning-of-sequence token, or -1 when the vocabulary names none.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS is the end-of-sequence token, or -1 when the vocabulary names none.
func (t *Tokenizer) EOS() int32 { return t.eos }

// Pad is the padding token, or -1 when the vocabulary names none.
func (t *Tokenizer) Pad() int32 { return t.pad }

// AddBOS reports whether Encode puts BOS in front (tokenizer.ggml.add_bos_token).
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// IsEOG reports whether generation stops at token id.
func (t *Tokenizer) IsEOG(id int32) bool { return slices.Contains(t.eog, id) }

// EOG lists the end-of-generation tokens in increasing order.
func (t *Tokenizer) EOG() []int32 { return slices.Clone(t.eog) }

// PreTokenizer is the tokenizer.ggml.pre name in use.
func (t *Tokenizer) PreTokenizer() string { return t.pre }

// Protected lists the tokens that text turns into only with ParseSpecial (CONTROL and
// UNKNOWN tokens such as "<|im_start|>"), longest text first: the ones a prompt built from
// outside text must not contain unless the prompt's own markup put them there.
func (t *Tokenizer) Protected() []int32 {
	var out []int32
	for _, id := range t.specials {
		if typ := t.types[id]; typ == TypeControl || typ == TypeUnknown {
			out = append(out, id)
		}
	}
	return out
}
