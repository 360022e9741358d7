package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/chat"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/sample"
	"github.com/redlite/batch/grammar"
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
	repPenalty := fs.Float64("repetition-penalty", 1, "divide the logits of generated tokens (1: off)")
	presPenalty := fs.Float64("presence-penalty", 0, "subtract from the logits of generated tokens (0: off)")
	freqPenalty := fs.Float64("frequency-penalty", 0, "subtract per occurrence from the logits of generated tokens (0: off)")
	schemaFile := fs.String("json-schema", "", "constrain the output to JSON valid against the JSON Schema in `file`")
	grammarFile := fs.String("grammar", "", "constrain the output to the GBNF-like grammar in `file`")
	regex := fs.String("regex", "", "constrain the output to text the regular `expression` matches entirely")
	jsonObject := fs.Bool("json-object", false, "constrain the output to a JSON object")
	var logprobs optionalInt
	fs.Var(&logprobs, "logprobs", "after the text, print a line per token: logprob, id, text and its `N` most likely alternatives (0–20)")
	chunk := fs.Int("chunk", 512, "prefill chunk size (0: whole prompt)")
	kvName := fs.String("kv", "f32", "KV cache precision: f32, f16 or q8_0")
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
	if logprobs.set && (logprobs.n < 0 || logprobs.n > sample.MaxTopLogprobs) {
		return usageErr("--logprobs must be in [0, %d], got %d", sample.MaxTopLogprobs, logprobs.n)
	}
	prog, err := constraint(*schemaFile, *grammarFile, *regex, *jsonObject)
	if err != nil {
		return err
	}
	params := sample.Params{TopK: *topK, TopP: float32(*topP), MinP: float32(*minP), Temperature: float32(*temperature), Seed: *seed,
		RepetitionPenalty: float32(*repPenalty), PresencePenalty: float32(*presPenalty), FrequencyPenalty: float32(*freqPenalty)}
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
	o := engine.GenerateOptions{
		MaxTokens:   *maxTokens,
		Sampler:     sampler,
		Stop:        stops,
		Chunk:       *chunk,
		Vocab:       tok,
		Stream:      tok.NewStreamDecoder(),
		OnToken:     func(_ int, text string) { io.WriteString(stdout, text) },
		Logprobs:    logprobs.set,
		TopLogprobs: logprobs.n,
	}
	if prog != nil {
		v, err := m.GrammarVocab()
		if err != nil {
			return err
		}
		o.Grammar = grammar.NewMatcher(prog, v)
	}
	g, err := s.Generate(ctx, ids, o)
	fmt.Fprintln(stdout)
	// A line per token: its logprob, id and text, then the alternatives' text and logprob.
	for _, lp := range g.Logprobs {
		fmt.Fprintf(stdout, "%.6f %d %q", lp.Logprob, lp.ID, tok.Decode([]int32{lp.ID}))
		for _, alt := range lp.Top {
			fmt.Fprintf(stdout, "  %q %.6f", tok.Decode([]int32{alt.ID}), alt.Logprob)
		}
		fmt.Fprintln(stdout)
	}
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

// optionalInt is an int flag that can tell "not given" from every value.
type optionalInt struct {
	n   int
	set bool
}

func (o *optionalInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.Itoa(o.n)
}

func (o *optionalInt) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return errors.New("not an integer")
	}
	o.n, o.set = n, true
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// constraint compiles the one grammar the flags name, or returns nil for none. Its errors
// name the file and what in it is refused.
func constraint(schemaFile, grammarFile, regex string, jsonObject bool) (*grammar.Program, error) {
	n := 0
	for _, set := range []bool{schemaFile != "", grammarFile != "", regex != "", jsonObject} {
		if set {
			n++
		}
	}
	if n > 1 {
		return nil, usageErr("give at most one of --json-schema, --grammar, --regex and --json-object")
	}
	var g *grammar.Grammar
	var err error
	switch {
	case schemaFile != "":
		data, rerr := os.ReadFile(schemaFile)
		if rerr != nil {
			return nil, usageErr("--json-schema: %v", rerr)
		}
		if g, err = grammar.FromJSONSchema(data); err != nil {
			return nil, usageErr("--json-schema %s: %v", schemaFile, err)
		}
	case grammarFile != "":
		data, rerr := os.ReadFile(grammarFile)
		if rerr != nil {
			return nil, usageErr("--grammar: %v", rerr)
		}
		if g, err = grammar.Parse(string(data)); err != nil {
			return nil, usageErr("--grammar %s: %v", grammarFile, err)
		}
	case regex != "":
		if g, err = grammar.FromRegex(regex); err != nil {
			return nil, usageErr("--regex: %v", err)
		}
	case jsonObject:
		g = grammar.JSONObject()
	default:
		return nil, nil
	}
	p, err := grammar.Compile(g)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return p, nil
}
