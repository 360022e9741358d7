package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/synth"
)

func init() {
	register(command{name: "synth", summary: "write a random-weight GGUF model of a named shape", run: runSynth})
}

func runSynth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("synth", stderr)
	shape := fs.String("shape", "", "model shape (see --list)")
	typ := fs.String("type", "f32", "storage type: "+strings.Join(synth.FileTypeNames(), "|"))
	vocab := fs.String("vocab", "", "copy the vocabulary (tokenizer.* keys, chat template) from this GGUF; its token count sets the vocabulary size")
	seed := fs.Uint64("seed", 0, "random seed of the weights")
	out := fs.String("out", "", "output GGUF file")
	list := fs.Bool("list", false, "list the shapes and types, and exit")
	quiet := fs.Bool("quiet", false, "do not report progress on stderr")
	layout := fs.Bool("layout", false, "write zeros as holes of a sparse file: the full layout and size on almost no disk, for planning and counting (the only way to write types synth cannot quantize, such as iq2_xxs)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *list {
		fmt.Fprintln(stdout, "shapes:")
		for _, s := range synth.Shapes() {
			fmt.Fprintf(stdout, "  %-12s %-8s %s\n", s.Name, s.Arch, s.Summary)
		}
		fmt.Fprintln(stdout, "types:")
		for _, n := range synth.FileTypeNames() {
			ft, _ := synth.ParseFileType(n)
			fmt.Fprintf(stdout, "  %-12s general.file_type %-2d %s\n", n, ft.LlamaFileType(), ft.Doc())
		}
		return nil
	}
	if *shape == "" {
		return usageErr("--shape is required (see --list)")
	}
	if *out == "" {
		return usageErr("--out is required")
	}
	if _, err := synth.LookupShape(*shape); err != nil {
		return usageErr("--shape: %v", err)
	}
	ft, err := synth.ParseFileType(*typ)
	if err != nil {
		return usageErr("--type: %v", err)
	}
	o := synth.Options{Type: ft, Seed: *seed, Layout: *layout}
	if *vocab != "" {
		v, err := gguf.Open(*vocab)
		if err != nil {
			return fmt.Errorf("--vocab: %w", err)
		}
		defer v.Close()
		o.Vocab = v
	}
	start := time.Now()
	tty := isTerminal(stderr)
	if !*quiet {
		shown := -1
		o.Progress = func(done, total int, name string) {
			if tty {
				// One line, rewritten in place.
				fmt.Fprintf(stderr, "\r[%d/%d] %-40s", done+1, total, name)
				return
			}
			// A pipe or a log gets a line per tenth, not one per tensor.
			if tenth := (done + 1) * 10 / total; tenth > shown {
				shown = tenth
				fmt.Fprintf(stderr, "[%d/%d] %d%% %s\n", done+1, total, tenth*10, name)
			}
		}
	}
	n, err := synth.WriteFile(ctx, *out, *shape, o)
	if !*quiet && tty {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %s %s, %d bytes in %.1fs\n", *out, *shape, ft, n, time.Since(start).Seconds())
	return nil
}
