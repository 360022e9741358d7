package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/redlite/batch/engine/chat"
	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/tokenizer"
)

func init() {
	register(command{name: "chat-template", summary: "render a conversation with a model's chat template (or a .jinja file), or print its token ids", run: runChatTemplate})
}

func runChatTemplate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("chat-template", stderr)
	model := fs.String("model", "", "GGUF `file` whose tokenizer.chat_template to render (a vocab-only GGUF will do)")
	templateFile := fs.String("template", "", "render this Jinja `file` instead (with --model, the model's tokens fill bos_token and eos_token)")
	casePath := fs.String("case", "", "the conversation: a JSON `file` (\"-\" for stdin) with messages and optionally add_generation_prompt, tools, enable_thinking, as one case of cases.json (required)")
	tokens := fs.Bool("tokens", false, "print the prompt's token ids (comma-separated) instead of its text; needs --model")
	bos := fs.String("bos-token", "", "bos_token for --template without --model")
	eos := fs.String("eos-token", "", "eos_token for --template without --model")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: redlite chat-template (--model M.gguf | --template F.jinja) --case CASE.json [--tokens]")
		fmt.Fprintln(stderr, "\nPrints the rendered prompt exactly as the template renders it (nothing added), or with --tokens")
		fmt.Fprintln(stderr, "its token ids as a worker encodes them. A template that raises exits 1 with its message.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *model == "" && *templateFile == "":
		return usageErr("give --model or --template")
	case *casePath == "":
		return usageErr("--case is required")
	case *tokens && *model == "":
		return usageErr("--tokens needs --model (its tokenizer)")
	}

	raw, err := readArg(*casePath)
	if err != nil {
		return fmt.Errorf("read case: %w", err)
	}
	var conv chat.Conversation
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&conv); err != nil {
		return fmt.Errorf("case %s: %w", *casePath, err)
	}

	var tmpl *chat.Template
	var tok *tokenizer.Tokenizer
	if *model != "" {
		f, err := gguf.Open(*model)
		if err != nil {
			return err
		}
		defer f.Close()
		if *tokens {
			if tok, err = tokenizer.FromGGUF(f); err != nil {
				return err
			}
		}
		if *templateFile == "" {
			if tmpl, err = chat.FromGGUF(f); err != nil {
				return err
			}
		} else {
			if tmpl, err = templateFromFile(*templateFile); err != nil {
				return err
			}
			if vocab, err := chat.FromGGUF(f); err == nil {
				tmpl.BOSToken, tmpl.EOSToken = vocab.BOSToken, vocab.EOSToken
			}
		}
	} else {
		if tmpl, err = templateFromFile(*templateFile); err != nil {
			return err
		}
		tmpl.BOSToken, tmpl.EOSToken = *bos, *eos
	}

	if !*tokens {
		out, err := tmpl.Render(conv)
		if err != nil {
			return err
		}
		_, err = io.WriteString(stdout, out)
		return err
	}
	p, err := tmpl.Encode(conv, tok)
	if err != nil {
		return err
	}
	parts := make([]string, len(p.IDs))
	for i, id := range p.IDs {
		parts[i] = strconv.Itoa(int(id))
	}
	_, err = fmt.Fprintln(stdout, strings.Join(parts, ","))
	return err
}

func templateFromFile(path string) (*chat.Template, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return chat.New(path, string(src))
}
