package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
)

func init() {
	register(command{name: "logits", summary: "write the logits at every position as float32 (for parity checks)", run: runLogits})
}

func runLogits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("logits", stderr)
	modelPath := fs.String("model", "", "GGUF model `file` (required)")
	tokenList := fs.String("tokens", "", "comma-separated token `ids`")
	prompt := fs.String("prompt", "", "text to tokenize (instead of --tokens)")
	parseSpecial := fs.Bool("parse-special", false, "with --prompt: match control tokens in the text")
	chunk := fs.Int("chunk", 0, "prefill chunk size (0: whole prompt)")
	kvName := fs.String("kv", "f32", "KV cache precision: f32, f16 or q8_0")
	threads := fs.Int("threads", 0, "CPU threads (0: all)")
	backend := backendFlag(fs)
	out := fs.String("out", "", "output `file`: float32 little-endian, row-major [positions][vocab] (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *modelPath == "" || *out == "" {
		return usageErr("--model and --out are required")
	}
	if (*tokenList == "") == (*prompt == "") {
		return usageErr("give exactly one of --tokens and --prompt")
	}
	if *chunk < 0 {
		return usageErr("--chunk must be ≥ 0, got %d", *chunk)
	}
	kv, err := ml.ParseDType(*kvName)
	if err != nil {
		return usageErr("--kv: %v", err)
	}
	m, err := loadModel(*modelPath, *backend, *threads)
	if err != nil {
		return err
	}
	defer m.Close()
	var tokens []int32
	if *tokenList != "" {
		if tokens, err = parseTokens(*tokenList); err != nil {
			return usageErr("--tokens: %v", err)
		}
	} else {
		tok, err := m.Tokenizer()
		if err != nil {
			return err
		}
		tokens = tok.Encode(*prompt, *parseSpecial)
		if len(tokens) == 0 {
			return usageErr("--prompt gives no tokens")
		}
	}
	s, err := m.NewSession(engine.SessionOptions{Context: len(tokens), KV: kv})
	if err != nil {
		return err
	}
	defer s.Close()
	logits, err := s.Prefill(ctx, tokens, engine.PrefillOptions{Chunk: *chunk, AllLogits: true})
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	var b [4]byte
	for _, v := range logits {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
		w.Write(b[:])
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %d positions × %d logits to %s\n", len(tokens), m.Config().Vocab, *out)
	return nil
}

func parseTokens(s string) ([]int32, error) {
	var ids []int32
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		n, err := strconv.ParseInt(part, 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("item %d (%q) is not a token id", i+1, part)
		}
		ids = append(ids, int32(n))
	}
	return ids, nil
}
