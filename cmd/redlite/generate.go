package main

import (
	"context"
	"fmt"
	"io"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/chat"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/sample"
)

func init() {
	register(command{name: "generate", summary: "generate text from a prompt and report prefill and decode speed", run: runGenerate})
}

func runGenerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate", stderr)
	modelPath := fs.String("model", "", "GGUF model `file` (required)")
	prompt := fs.String("prompt", "", "the prompt (required)")
	system := fs.String("system", "", "system message (chat mode)")
	raw := fs.Bool("raw", false, "feed the prompt as it is instead of through the model's chat template")
	templateName := fs.String("chat-template", "", "use a built-in chat template (chatml, qwen3) instead of the model's own")
	thinkingFlag := fs.Bool("thinking", false, "let a thinking model reason before it answers (the template's enable_thinking)")
	maxTokens := fs.Int("max-tokens", 128, "tokens to generate at most")
	temperature := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	topK := fs.Int("top-k", sample.DefaultTopK, "top-k filter (0: off)")
	topP := fs.Float64("top-p", sample.DefaultTopP, "top-p filter (1: off)")
	minP := fs.Float64("min-p", sample.DefaultMinP, "min-p filter (0: off)")
	seed := fs.Uint64("seed", 0, "sampling seed")
	chunk := fs.Int("chunk", 512, "prefill chunk size (0: whole prompt)")
	kvName := fs.String("kv", "f32", "KV cache precision: f32 or f16")
	ctxLen := fs.Int("context", 0, "session context (0: prompt + max tokens)")
	threads := fs.Int("threads", 0, "CPU threads (0: all)")
	backend := backendFlag(fs)
	var stops stringList
	fs.Var(&stops, "stop", "stop string (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *modelPath == "" || *prompt == "" {
		return usageErr("--model and --prompt are required")
	}
	if *maxTokens < 1 || *chunk < 0 || *ctxLen < 0 {
		return usageErr("--max-tokens must be ≥ 1, --chunk and --context ≥ 0")
	}
	kv, err := ml.ParseDType(*kvName)
	if err != nil {
		return usageErr("--kv: %v", err)
	}
	params := sample.Params{TopK: *topK, TopP: float32(*topP), MinP: float32(*minP), Temperature: float32(*temperature), Seed: *seed}
	if err := params.Validate(); err != nil {
		return usageErr("%v", err)
	}
	sampler, err := sample.New(params)
	if err != nil {
		return usageErr("%v", err)
	}

	m, err := loadModel(*modelPath, *backend, *threads)
	if err != nil {
		return err
	}
	defer m.Close()
	tok, err := m.Tokenizer()
	if err != nil {
		return err
	}
	var ids []int32
	if *raw {
		ids = tok.Encode(*prompt, false)
	} else {
		tmpl, err := chat.FromGGUF(m.File)
		if *templateName != "" {
			tmpl, err = chat.Builtin(*templateName)
		}
		if err != nil {
			return fmt.Errorf("%w (use --raw to skip the chat template, or --chat-template)", err)
		}
		thinking := thinkingFlag
		var msgs []chat.Message
		if *system != "" {
			msgs = append(msgs, chat.Message{Role: "system", Content: *system})
		}
		msgs = append(msgs, chat.Message{Role: "user", Content: *prompt})
		p, err := tmpl.Encode(chat.Conversation{
			Messages:            chat.Messages(msgs...),
			AddGenerationPrompt: true,
			EnableThinking:      thinking,
		}, tok)
		if err != nil {
			return err
		}
		ids = p.IDs
	}
	n := *ctxLen
	if n == 0 {
		n = len(ids) + *maxTokens
	}
	s, err := m.NewSession(engine.SessionOptions{Context: n, KV: kv})
	if err != nil {
		return err
	}
	defer s.Close()
	g, err := s.Generate(ctx, ids, engine.GenerateOptions{
		MaxTokens: *maxTokens,
		Sampler:   sampler,
		Stop:      stops,
		Chunk:     *chunk,
		Vocab:     tok,
		Stream:    tok.NewStreamDecoder(),
		OnToken:   func(_ int, text string) { io.WriteString(stdout, text) },
	})
	fmt.Fprintln(stdout)
	if err != nil && g.FinishReason != engine.FinishCancelled {
		return err
	}
	fmt.Fprintf(stderr, "finish: %s; prompt %d tokens, %.2f tok/s; generated %d tokens, %.2f tok/s (%s, %d threads, KV %s)\n",
		g.FinishReason, g.PromptTokens, rate(g.PromptTokens, g.Prefill.Seconds()),
		g.CompletionTokens, rate(g.CompletionTokens, g.Decode.Seconds()), m.Backend.Name(), m.Backend.Threads(), kv)
	return nil
}

func rate(n int, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(n) / seconds
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
