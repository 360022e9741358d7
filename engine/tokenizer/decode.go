package tokenizer

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// DecodeOpts controls DecodeWith and the stream decoder.
type DecodeOpts struct {
	// Special writes CONTROL and UNKNOWN tokens as their text ("<|im_end|>"); by default they
	// decode to nothing, which is what a user should see of a model's output. It is
	// llama.cpp's detokenize "special" flag. USER_DEFINED tokens ("<think>") always decode to
	// their text.
	Special bool
}

// piece is what token id decodes to when special tokens are shown.
func (t *Tokenizer) piece(id int32) string {
	s := t.tokens[id]
	switch t.types[id] {
	case TypeControl, TypeUnknown, TypeUserDefined:
		return s
	case TypeNormal:
		return unmapBytes(s)
	case TypeByte: // "<0xXX>"
		if len(s) == 6 && strings.HasPrefix(s, "<0x") && s[5] == '>' {
			if b, err := strconv.ParseUint(s[3:5], 16, 8); err == nil {
				return string([]byte{byte(b)})
			}
		}
	}
	return "" // UNUSED and UNDEFINED tokens have no text
}

// pieceFor is the decoded bytes of id under o; ids outside the vocabulary decode to nothing.
func (t *Tokenizer) pieceFor(id int32, o DecodeOpts) string {
	if id < 0 || int(id) >= len(t.pieces) {
		return ""
	}
	if !o.Special {
		if typ := t.types[id]; typ == TypeControl || typ == TypeUnknown {
			return ""
		}
	}
	return t.pieces[id]
}

// Decode turns ids back into text, leaving out CONTROL tokens (see DecodeOpts). The result is
// the exact bytes the tokens stand for; a cut through a multi-byte character leaves invalid
// UTF-8 at the cut. For text arriving token by token use a StreamDecoder.
func (t *Tokenizer) Decode(ids []int32) string { return t.DecodeWith(ids, DecodeOpts{}) }

// DecodeWith is Decode with options.
func (t *Tokenizer) DecodeWith(ids []int32, o DecodeOpts) string {
	var sb strings.Builder
	sb.Grow(4 * len(ids))
	for _, id := range ids {
		sb.WriteString(t.pieceFor(id, o))
	}
	return sb.String()
}

// StreamDecoder turns tokens into text one token at a time and only ever hands out complete
// UTF-8: bytes of a character split across tokens are held back until the character is
// complete. Bytes that can never start or continue a valid character become U+FFFD (one per
// byte), so every chunk is valid UTF-8; for valid output the chunks concatenate to Decode's
// result. A StreamDecoder is not safe for concurrent use.
type StreamDecoder struct {
	t       *Tokenizer
	opts    DecodeOpts
	pending []byte
}

// NewStreamDecoder starts a stream with the default DecodeOpts.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder { return t.NewStreamDecoderWith(DecodeOpts{}) }

// NewStreamDecoderWith starts a stream with options.
func (t *Tokenizer) NewStreamDecoderWith(o DecodeOpts) *StreamDecoder {
	return &StreamDecoder{t: t, opts: o}
}

// Next adds token id and returns the text that is now complete (possibly "").
func (d *StreamDecoder) Next(id int32) string {
	d.pending = append(d.pending, d.t.pieceFor(id, d.opts)...)
	cut := len(d.pending)
	// A character is at most 4 bytes, so only the last 3 can be an unfinished one.
	for i := max(0, len(d.pending)-3); i < len(d.pending); i++ {
		if !utf8.FullRune(d.pending[i:]) {
			cut = i
			break
		}
	}
	out := validChunk(d.pending[:cut])
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return out
}

// Flush returns whatever is held back (an unfinished character, as U+FFFD) and resets the
// stream.
func (d *StreamDecoder) Flush() string {
	out := validChunk(d.pending)
	d.pending = d.pending[:0]
	return out
}

func validChunk(b []byte) string { return validUTF8(string(b)) }
