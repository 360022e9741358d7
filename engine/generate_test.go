package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/sample"
)

func generate(t *testing.T, m *Model, so SessionOptions, prompt []int32, o GenerateOptions) (Generation, *Session) {
	t.Helper()
	s, err := m.NewSession(so)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := m.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	o.Stream = tok.NewStreamDecoder()
	g, err := s.Generate(context.Background(), prompt, o)
	if err != nil {
		t.Fatal(err)
	}
	return g, s
}

// TestGenerateMTP checks that greedy generation with the MTP head gives exactly the tokens,
// text and finish reason of plain generation, at the max-tokens limit and at a full context.
func TestGenerateMTP(t *testing.T) {
	m, err := Load(writeMTPModel(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	prompt := loadReference(t, "tiny-qwen3next-F16", "seq64").Tokens[:20]
	for _, c := range []struct {
		name      string
		context   int
		maxTokens int
	}{
		{"MaxTokens", 64, 17},
		{"FullContext", 20 + 9, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			so := SessionOptions{Context: c.context, KV: ml.F32}
			want, _ := generate(t, m, so, prompt, GenerateOptions{MaxTokens: c.maxTokens, Chunk: 5})
			so.MTP = true
			// The random head's drafts are never right; drafts that are right two times in
			// three take the accepting path as well.
			got, _ := generate(t, m, so, prompt, GenerateOptions{MaxTokens: c.maxTokens, Chunk: 5})
			real := m.Graph
			m.Graph = &oracleDrafter{Graph: real, Drafter: real.(model.Drafter), want: want.Tokens, base: len(prompt), vocab: m.Config().Vocab}
			oracle, s := generate(t, m, so, prompt, GenerateOptions{MaxTokens: c.maxTokens, Chunk: 5})
			m.Graph = real
			t.Logf("head: %+v; oracle: %+v", got.Speculation, oracle.Speculation)
			for _, g := range []Generation{got, oracle} {
				if !slices.Equal(g.Tokens, want.Tokens) || g.Text != want.Text || g.FinishReason != want.FinishReason {
					t.Errorf("with MTP: %v %q %s\nwithout:  %v %q %s", g.Tokens, g.Text, g.FinishReason, want.Tokens, want.Text, want.FinishReason)
				}
			}
			if got.Speculation.Drafted == 0 || oracle.Speculation.Accepted == 0 || oracle.Speculation.Accepted == oracle.Speculation.Drafted {
				t.Errorf("speculation: head %+v, oracle %+v; want drafts, and oracle drafts both accepted and rejected", got.Speculation, oracle.Speculation)
			}
			if oracle.Speculation.Passes >= len(want.Tokens)-1 {
				t.Errorf("oracle drafts took %d passes for %d tokens: nothing saved", oracle.Speculation.Passes, len(want.Tokens))
			}
			if got.FinishReason != FinishLength {
				t.Errorf("finish %q, want length", got.FinishReason)
			}
			if s.Pos() > c.context {
				t.Errorf("session at %d past its %d positions", s.Pos(), c.context)
			}
		})
	}
	// A sampler that is not greedy never speculates: same seed, same tokens.
	p := sample.DefaultParams()
	p.Seed = 7
	draw := func(mtp bool) []int32 {
		sm, err := sample.New(p)
		if err != nil {
			t.Fatal(err)
		}
		g, _ := generate(t, m, SessionOptions{Context: 64, MTP: mtp}, prompt, GenerateOptions{MaxTokens: 12, Sampler: sm})
		return g.Tokens
	}
	if a, b := draw(false), draw(true); !slices.Equal(a, b) {
		t.Errorf("sampled tokens differ with MTP on: %v vs %v", b, a)
	}
}

// TestGenerateStops covers the end conditions: a stop string, max tokens and cancellation.
func TestGenerateStops(t *testing.T) {
	m := loadModel(t, "tiny-qwen3-Q8_0.gguf")
	prompt := loadReference(t, "tiny-qwen3-Q8_0", "seq8").Tokens
	free, _ := generate(t, m, SessionOptions{Context: 64}, prompt, GenerateOptions{MaxTokens: 24})
	if free.FinishReason != FinishLength || free.CompletionTokens != 24 || free.PromptTokens != len(prompt) {
		t.Fatalf("free run: %+v", free)
	}
	// Stop at a piece of the free run's text: the result ends just before it.
	if len(free.Text) < 6 {
		t.Fatalf("free text %q too short to cut", free.Text)
	}
	stop := free.Text[len(free.Text)-3:]
	at := strings.Index(free.Text, stop)
	cut, _ := generate(t, m, SessionOptions{Context: 64}, prompt, GenerateOptions{MaxTokens: 24, Stop: []string{stop}})
	if cut.FinishReason != FinishStop || cut.Text != free.Text[:at] {
		t.Errorf("stop %q: text %q (%s), want %q", stop, cut.Text, cut.FinishReason, free.Text[:at])
	}

	ctx, cancel := context.WithCancel(context.Background())
	s, err := m.NewSession(SessionOptions{Context: 64})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := m.Tokenizer()
	var streamed strings.Builder
	g, err := s.Generate(ctx, prompt, GenerateOptions{MaxTokens: 24, Stream: tok.NewStreamDecoder(),
		OnToken: func(n int, text string) {
			streamed.WriteString(text)
			if n == 5 {
				cancel()
			}
		}})
	if !errors.Is(err, context.Canceled) || g.FinishReason != FinishCancelled || g.CompletionTokens != 5 {
		t.Errorf("cancelled after 5 tokens: %d tokens, %q, %v", g.CompletionTokens, g.FinishReason, err)
	}
	// The partial text is what was streamed, and the start of the uncancelled run's.
	if g.Text != streamed.String() || g.Text == "" || !strings.HasPrefix(free.Text, g.Text) {
		t.Errorf("cancelled text %q, streamed %q, free run %q", g.Text, streamed.String(), free.Text)
	}
	if g.Decode <= 0 || g.Decode > time.Minute {
		t.Errorf("decode time %v", g.Decode)
	}
}

// TestSessionClose checks that a closed session refuses work and that Close is idempotent.
func TestSessionClose(t *testing.T) {
	m := loadModel(t, "tiny-qwen3-Q8_0.gguf")
	s, err := m.NewSession(SessionOptions{Context: 16})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decode(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	if _, err := s.Decode(context.Background(), 1); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("decode after Close: %v", err)
	}
	if _, err := s.Prefill(context.Background(), []int32{1, 2}, PrefillOptions{}); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("prefill after Close: %v", err)
	}
	if _, err := s.Snapshot(); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("snapshot after Close: %v", err)
	}
}
