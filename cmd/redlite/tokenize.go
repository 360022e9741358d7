package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/redlite/batch/engine/tokenizer"
)

func init() {
	register(command{name: "tokenize", summary: "print the token ids of a text (works on vocab-only GGUFs)", run: runTokenize})
}

func runTokenize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return tokenizeCmd(args, os.Stdin, stdout, stderr)
}

// tokenizeCmd reads the text from --text, --file or stdin.
func tokenizeCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", stderr)
	model := fs.String("model", "", "GGUF `file` with a tokenizer (a vocab-only GGUF will do) (required)")
	text := fs.String("text", "", "the text to tokenize")
	file := fs.String("file", "", "read the text from this `file` (\"-\" for stdin)")
	parseSpecial := fs.Bool("parse-special", false, "match control tokens such as <|im_start|> in the text")
	asJSON := fs.Bool("json", false, `print {"ids":[...],"tokens":[...]}`)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *model == "" {
		return usageErr("--model is required")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["text"] && set["file"] {
		return usageErr("give at most one of --text and --file (without either, the text is read from stdin)")
	}
	input := *text
	if !set["text"] {
		r := stdin
		if *file != "" && *file != "-" {
			fh, err := os.Open(*file)
			if err != nil {
				return err
			}
			defer fh.Close()
			r = fh
		}
		b, err := io.ReadAll(r)
		if err != nil {
			return fmt.Errorf("read text: %w", err)
		}
		input = string(b)
	}
	tok, err := tokenizer.Load(*model)
	if err != nil {
		return err
	}
	ids := tok.Encode(input, *parseSpecial)
	if *asJSON {
		out := struct {
			IDs    []int32  `json:"ids"`
			Tokens []string `json:"tokens"`
		}{IDs: append([]int32{}, ids...), Tokens: make([]string, len(ids))}
		for i, id := range ids {
			out.Tokens[i] = tok.Token(id)
		}
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false) // keep <|im_start|> readable
		return enc.Encode(out)
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	// Comma-separated, as redlite logits --tokens takes them.
	_, err = fmt.Fprintln(stdout, strings.Join(parts, ","))
	return err
}
