package engine

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/sample"
)

// TestStreamedText checks the text OnToken hands out, in a session and in the scheduler:
// whole characters only (random weights give byte tokens that split characters), nothing of
// a stop string that spans two tokens, and all of it put together is the result's text,
// the same for the same seed with and without the scheduler.
func TestStreamedText(t *testing.T) {
	m := loadModel(t, "tiny-qwen3-Q8_0.gguf")
	tok, err := m.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	prompt := loadReference(t, "tiny-qwen3-Q8_0", "seq8").Tokens
	params := sample.Params{Temperature: 0.9, TopP: 1, Seed: 5}
	newSampler := func() *sample.Sampler {
		s, err := sample.New(params)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	free, _ := generate(t, m, SessionOptions{Context: 512}, prompt, GenerateOptions{MaxTokens: 200, Sampler: newSampler()})

	// Tokens that end inside a character (the decoder holds them back: ""), and a stop
	// string of four ASCII letters across the boundary of two tokens of text.
	split, stop := 0, ""
	dec := tok.NewStreamDecoder()
	var text string
	isWord := func(s string) bool {
		return strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") == ""
	}
	for _, id := range free.Tokens {
		piece := dec.Next(id)
		if piece == "" {
			split++
		}
		if stop == "" && len(text) >= 2 && len(piece) >= 2 && isWord(text[len(text)-2:]) && isWord(piece[:2]) {
			stop = text[len(text)-2:] + piece[:2]
		}
		text += piece
	}
	if stop == "" || split == 0 {
		t.Fatalf("no stop string across two tokens or no split character in %q", free.Text)
	}
	// And a multi-byte character as a stop string (its bytes may come in several tokens).
	wide := ""
	for _, r := range free.Text {
		if r >= 0x80 && r != utf8.RuneError {
			wide = string(r)
			break
		}
	}
	if wide == "" {
		t.Fatalf("no multi-byte character in %q", free.Text)
	}

	t.Logf("%d tokens, %d bytes, %d tokens held back (inside a character), stops %q and %q", len(free.Tokens), len(free.Text), split, stop, wide)
	check := func(name string, run func(GenerateOptions) (Generation, error)) {
		for _, o := range []GenerateOptions{{}, {Stop: []string{stop}}, {Stop: []string{wide}}} {
			want := free.Text
			if o.Stop != nil {
				want = free.Text[:strings.Index(free.Text, o.Stop[0])]
			}
			var streamed strings.Builder
			o.MaxTokens, o.Sampler, o.Vocab = 200, newSampler(), nil
			o.OnToken = func(n int, text string) {
				if !utf8.ValidString(text) {
					t.Errorf("%s: token %d handed out %q, not whole characters", name, n, text)
				}
				streamed.WriteString(text)
				if o.Stop != nil && !strings.HasPrefix(want, streamed.String()) {
					t.Fatalf("%s: token %d: streamed %q, past the text before the stop string %q", name, n, streamed.String(), want)
				}
			}
			g, err := run(o)
			if err != nil {
				t.Fatal(err)
			}
			if g.Text != streamed.String() {
				t.Errorf("%s stop %q: streamed %q, result %q", name, o.Stop, streamed.String(), g.Text)
			}
			if g.Text != want || o.Stop != nil && g.FinishReason != FinishStop {
				t.Errorf("%s stop %q: %q (%s), want the free run's text up to the stop", name, o.Stop, g.Text, g.FinishReason)
			}
		}
	}
	check("session", func(o GenerateOptions) (Generation, error) {
		s, err := m.NewSession(SessionOptions{Context: 512})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		o.Stream = tok.NewStreamDecoder()
		return s.Generate(context.Background(), prompt, o)
	})
	sch, err := m.NewScheduler(SchedulerOptions{KV: ml.F32, Slots: 2, Blocks: 8, BlockSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer sch.Close()
	check("scheduler", func(o GenerateOptions) (Generation, error) {
		o.Stream = tok.NewStreamDecoder()
		return sch.Generate(context.Background(), prompt, 0, o)
	})
}
