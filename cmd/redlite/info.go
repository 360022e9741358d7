package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/modelinfo"
	"github.com/redlite/batch/metalkit/device"
)

func init() {
	register(command{name: "info", summary: "show a GGUF model's architecture, hyperparameters, tensor types and bytes by class", run: runInfo})
}

func runInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("info", stderr)
	asJSON := fs.Bool("json", false, "print the summary as JSON (stable fields, for scripts and the planner)")
	backend := backendFlag(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: redlite info MODEL.gguf [--json] [--backend auto|cpu|metal|metal-harness]")
		fs.PrintDefaults()
	}
	// The model path may come before or after the flags.
	var path string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		path, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return parseFlags(fs, args) // same error, wrapped as a usage error (or ErrHelp)
	}
	rest := fs.Args()
	if path == "" && len(rest) > 0 {
		path, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return usageErr("unexpected argument %q", rest[0])
	}
	if path == "" {
		return usageErr("give the model file: redlite info MODEL.gguf")
	}
	f, err := gguf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := modelinfo.Inspect(f)
	if err != nil {
		return err
	}
	// The backend the engine commands and the daemon would run the model on here.
	b, err := openBackend(*backend, 0)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(struct {
			modelinfo.Info
			Backend    string `json:"backend"`
			CPUKernels string `json:"cpu_kernels,omitempty"`
		}{info, b.Name(), cpuKernels(b, f)})
	}
	printInfo(stdout, info)
	fmt.Fprintf(stdout, "\nbackend: %s\n", backendDescription(b))
	if k := cpuKernels(b, f); k != "" {
		fmt.Fprintf(stdout, "cpu kernels: %s\n", k)
	}
	return nil
}

// backendDescription names a backend and what it runs on.
func backendDescription(b ml.Backend) string {
	if d, ok := b.(interface{ Device() device.Device }); ok {
		return fmt.Sprintf("%s (%s)", b.Name(), d.Device().Name())
	}
	if b.Threads() > 0 {
		return fmt.Sprintf("%s (%d threads)", b.Name(), b.Threads())
	}
	return b.Name()
}

func printInfo(w io.Writer, info modelinfo.Info) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	row("file:\t%s (%s bytes)", info.Path, infoCommas(uint64(info.FileBytes)))
	row("architecture:\t%s", info.Architecture)
	row("name:\t%s", info.Name)
	row("file type:\t%s (%d)", info.FileType.Name, info.FileType.ID)
	row("parameters:\t%s", infoCommas(info.Parameters))
	v := info.Vocab
	row("vocabulary:\t%s tokens, model %q, pre %q, %s merges, bos %d, eos %d", infoCommas(uint64(v.Size)), v.Model, v.Pre, infoCommas(uint64(v.Merges)), v.BOS, v.EOS)
	row("chat template:\t%s", infoYesNo(info.ChatTemplate))
	row("tensors:\t%d, %s bytes", info.TensorCount, infoCommas(info.TensorBytes))
	tw.Flush()

	fmt.Fprintln(w, "\nhyperparameters:")
	for _, k := range slices.Sorted(maps.Keys(info.Hyperparameters)) {
		fmt.Fprintf(tw, "  %s\t%s\n", k, infoValue(info.Hyperparameters[k]))
	}
	tw.Flush()

	fmt.Fprintln(w, "\ntypes:")
	for _, t := range info.Types {
		fmt.Fprintf(tw, "  %s\t%d tensors\t%s bytes\t%s\n", t.Type, t.Tensors, infoCommas(t.Bytes), infoPercent(t.Bytes, info.TensorBytes))
	}
	tw.Flush()

	fmt.Fprintln(w, "\nbytes by class:")
	for _, c := range info.Classes {
		if c.Tensors == 0 {
			continue
		}
		fmt.Fprintf(tw, "  %s\t%d tensors\t%s bytes\t%s\n", c.Class, c.Tensors, infoCommas(c.Bytes), infoPercent(c.Bytes, info.TensorBytes))
	}
	tw.Flush()

	fmt.Fprintln(w, "\nlayers:")
	fmt.Fprintf(tw, "  layer\tkind\tbytes\texpert bytes\n")
	for _, l := range info.Layers {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", l.Index, l.Kind, infoCommas(l.Bytes), infoCommas(l.ExpertBytes))
	}
	tw.Flush()

	m := info.Memory
	fmt.Fprintln(w, "\nmemory:")
	fmt.Fprintf(tw, "  dense weights\t%s bytes\n", infoCommas(m.DenseBytes))
	fmt.Fprintf(tw, "  routed experts\t%s bytes\n", infoCommas(m.ExpertBytes))
	fmt.Fprintf(tw, "  KV per position\t%s bytes f32, %s bytes f16, %s bytes q8_0\n", infoCommas(m.KVBytesPerPositionF32), infoCommas(m.KVBytesPerPositionF16), infoCommas(m.KVBytesPerPositionQ8_0))
	fmt.Fprintf(tw, "  recurrent state per sequence\t%s bytes\n", infoCommas(m.RecurrentBytesPerSequence))
	tw.Flush()
}

func infoValue(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case float32, float64:
		return fmt.Sprintf("%g", x)
	case []int64:
		if len(x) > 16 {
			return fmt.Sprintf("[%d integers]", len(x))
		}
	case []float32:
		if len(x) > 16 {
			return fmt.Sprintf("[%d floats]", len(x))
		}
	case []string:
		if len(x) > 16 {
			return fmt.Sprintf("[%d strings]", len(x))
		}
	}
	return fmt.Sprint(v)
}

func infoYesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func infoPercent(part, total uint64) string {
	if total == 0 {
		return ""
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(total))
}

// infoCommas formats 1234567 as "1,234,567".
func infoCommas(n uint64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
