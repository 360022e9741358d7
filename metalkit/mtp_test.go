package metalkit

import (
	gocontext "context"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/synth"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/harness/harnesstest"
)

// listCounter counts the command lists (passes) run on a device.
type listCounter struct {
	device.Device
	lists atomic.Int64
}

func (d *listCounter) NewCommands() device.Commands {
	d.lists.Add(1)
	return d.Device.NewCommands()
}

// mtpModels writes the synthesized tiny-qwen3next-mtp (the fixtures have no MTP head) and
// loads it on the CPU backend, the reference, and on this backend over dev.
func mtpModels(t *testing.T, dev device.Device) (ref, m *engine.Model) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny-qwen3next-mtp.gguf")
	if _, err := synth.WriteFile(gocontext.Background(), path, "tiny-qwen3next-mtp", synth.Options{Type: synth.Q8_0, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	load := func(b ml.Backend) *engine.Model {
		m, err := engine.Load(path, engine.Options{Backend: b, CPUDot: "exact"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	return load(refCPU()), load(New(dev))
}

// rightTwiceInThree replaces the MTP head's guesses with the known greedy continuation, wrong
// on every third draft, so that a session takes both the accepting and the rejecting path
// (the synthesized head's own drafts are never right).
type rightTwiceInThree struct {
	model.Graph
	model.Drafter
	want   []int32 // greedy tokens, want[0] fed at position base
	base   int
	vocab  int
	drafts int
}

func (o *rightTwiceInThree) Draft(ctx ml.Context, s model.State, token int32, pos int) ml.Tensor {
	o.Drafter.Draft(ctx, s, token, pos) // the head's cache follows as on the real path
	guess := o.want[pos-o.base+1]
	if o.drafts++; o.drafts%3 == 0 {
		guess = (guess + 1) % int32(o.vocab)
	}
	logits := make([]float32, o.vocab)
	logits[guess] = 1
	return ctx.Input(logits, 1, o.vocab)
}

// TestMTPSession generates greedily in a session with MTP on the harness device, as the
// daemon runs a job at REDLITE_CONCURRENCY 1, with the synthesized head and with drafts
// right two times in three: the tokens and text equal the CPU's without MTP, and the passes
// (command lists, each a commit and a wait on a GPU) are those of
// engine.Session.speculate: one per accepted draft (checkpoint, draft and verification
// together), two per rejected one, one per token decoded alone.
func TestMTPSession(t *testing.T) {
	if testing.Short() {
		t.Skip("MTP on the harness device (-short skips it)")
	}
	dev := &listCounter{Device: harnesstest.Device(t)}
	ref, m := mtpModels(t, dev)
	prompt := []int32{5, 77, 300, 12, 9, 480}
	const maxTokens = 10
	gen := func(m *engine.Model, mtp bool) engine.Generation {
		t.Helper()
		tok, err := m.Tokenizer()
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.NewSession(engine.SessionOptions{Context: len(prompt) + maxTokens + 2, KV: ml.F16, MTP: mtp})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		g, err := s.Generate(gocontext.Background(), prompt, engine.GenerateOptions{MaxTokens: maxTokens, Stream: tok.NewStreamDecoder()})
		if err != nil {
			t.Fatalf("%s: %v", m.Backend.Name(), err)
		}
		return g
	}
	want := gen(ref, false)
	real := m.Graph
	for _, oracle := range []bool{false, true} {
		if oracle {
			m.Graph = &rightTwiceInThree{Graph: real, Drafter: real.(model.Drafter), want: want.Tokens, base: len(prompt), vocab: m.Config().Vocab}
		}
		dev.lists.Store(0)
		got := gen(m, true)
		lists := int(dev.lists.Load())
		m.Graph = real
		sp := got.Speculation
		t.Logf("oracle %v: %+v, %d command lists for %d tokens", oracle, sp, lists, len(got.Tokens))
		if !slices.Equal(got.Tokens, want.Tokens) || got.Text != want.Text {
			t.Errorf("oracle %v: metal-harness with MTP %v %q; the CPU without %v %q", oracle, got.Tokens, got.Text, want.Tokens, want.Text)
		}
		if sp.Drafted == 0 || oracle != (sp.Accepted > 0) || sp.Accepted == sp.Drafted {
			t.Errorf("oracle %v: speculation %+v", oracle, sp)
		}
		// The prefill is one pass; every token but the last is fed: a token decoded alone
		// takes a pass, an accepted draft feeds two tokens in one pass, a rejected one
		// feeds one in two.
		rejected := sp.Drafted - sp.Accepted
		alone := len(got.Tokens) - 1 - 2*sp.Accepted - rejected
		if wantLists := 1 + alone + sp.Accepted + 2*rejected; lists != wantLists {
			t.Errorf("oracle %v: %d command lists, want %d (%d alone, %d accepted, %d rejected)", oracle, lists, wantLists, alone, sp.Accepted, rejected)
		}
	}
	// With a bounded expert cache (an eighth of the experts) a pass splits at every MoE
	// layer to read the routing back, the draft's and the verification's alike: the same
	// tokens, and misses counted.
	b := m.Backend.(*Backend)
	if err := b.SetExpertCache(real.(model.Facts).ExpertTotalBytes() / 8); err != nil {
		t.Fatal(err)
	}
	defer b.SetExpertCache(0)
	m.Graph = &rightTwiceInThree{Graph: real, Drafter: real.(model.Drafter), want: want.Tokens, base: len(prompt), vocab: m.Config().Vocab}
	got := gen(m, true)
	m.Graph = real
	if !slices.Equal(got.Tokens, want.Tokens) || got.Speculation.Accepted == 0 || b.ExpertStats().Misses == 0 {
		t.Errorf("with an expert cache: %v (%+v, %+v); the CPU without MTP %v", got.Tokens, got.Speculation, b.ExpertStats(), want.Tokens)
	}
}
