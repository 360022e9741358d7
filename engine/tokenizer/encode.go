package tokenizer

import "strings"

// EncodeOpts controls EncodeWith.
type EncodeOpts struct {
	// ParseSpecial matches the text of CONTROL (and UNKNOWN) tokens such as "<|im_start|>"
	// and turns it into those tokens; otherwise that text is split like any other. Prompts
	// rendered from a chat template need it; user-supplied text should not have it.
	// USER_DEFINED tokens ("<think>", "<tool_call>" …) are matched either way, as in
	// llama.cpp and the Hugging Face tokenizer.
	ParseSpecial bool
	// AddSpecial puts BOS in front and EOS at the end when the vocabulary asks for them
	// (tokenizer.ggml.add_bos_token, add_eos_token). Qwen vocabularies ask for neither.
	AddSpecial bool
}

// Encode tokenizes text, adding BOS (and EOS) only when the vocabulary's add_bos_token (and
// add_eos_token) say so; see EncodeOpts for parseSpecial.
func (t *Tokenizer) Encode(text string, parseSpecial bool) []int32 {
	return t.EncodeWith(text, EncodeOpts{ParseSpecial: parseSpecial, AddSpecial: true})
}

// fragment is a piece of the input: raw text, or a special token matched in it.
type fragment struct {
	start, end int
	token      int32 // -1 for raw text
}

// EncodeWith tokenizes text as llama.cpp's llama_tokenize does with add_special and
// parse_special set from o.
func (t *Tokenizer) EncodeWith(text string, o EncodeOpts) []int32 {
	out := make([]int32, 0, len(text)/3+2)
	if o.AddSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	st := &bpeState{}
	for _, f := range t.partition(text, o.ParseSpecial) {
		if f.token >= 0 {
			out = append(out, f.token)
			continue
		}
		splitQwen2(validUTF8(text[f.start:f.end]), func(word string) {
			out = t.encodeWord(st, word, out)
		})
	}
	if o.AddSpecial && t.addEOS {
		out = append(out, t.eos)
	}
	return out
}

// partition cuts the special tokens out of text. Like llama.cpp it takes the special tokens
// one at a time, longest first, and splits every remaining raw fragment at each occurrence,
// so a longer token wins over a shorter one that overlaps it wherever they are.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{0, len(text), -1}}
	var next []fragment
	for _, id := range t.specials {
		typ := t.types[id]
		if !parseSpecial && (typ == TypeControl || typ == TypeUnknown) {
			continue
		}
		tok := t.tokens[id]
		found := false
		next = next[:0]
		for _, f := range frags {
			if f.token >= 0 {
				next = append(next, f)
				continue
			}
			for f.start < f.end {
				i := strings.Index(text[f.start:f.end], tok)
				if i < 0 {
					break
				}
				found = true
				if i > 0 {
					next = append(next, fragment{f.start, f.start + i, -1})
				}
				next = append(next, fragment{f.start + i, f.start + i + len(tok), id})
				f.start += i + len(tok)
			}
			if f.start < f.end {
				next = append(next, f)
			}
		}
		if found {
			frags, next = next, frags
		}
	}
	return frags
}
