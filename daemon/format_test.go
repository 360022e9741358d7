package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/sample"
	"github.com/redlite/batch/grammar/grammartest"
	"github.com/redlite/batch/jobs"
)

// personFormat is a response format whose schema has objects, arrays, enums, required
// properties, numbers and strings with patterns and formats.
func personFormat() *jobs.ResponseFormat {
	return &jobs.ResponseFormat{Type: jobs.FormatJSONSchema, JSONSchema: &jobs.JSONSchema{
		Name: "person", Schema: json.RawMessage(grammartest.Schemas["person"])}}
}

// TestResponseFormat runs 8 sampled jobs under a JSON Schema on the random-weight fixture,
// whose free output is noise, alone and in a batch of 4 slots: every text is valid against
// the schema (checked by grammartest, written apart from the grammar), and the logprobs are
// one per token, their bytes spell the text, and they are the engine's own for the same
// prompt, seed and settings.
func TestResponseFormat(t *testing.T) {
	b := setup(t)
	schema := []byte(grammartest.Schemas["person"])
	for _, concurrency := range []int{1, 4} {
		t.Run(fmt.Sprint("concurrency", concurrency), func(t *testing.T) {
			cfg := b.cfg
			cfg.Concurrency = concurrency
			d := startDaemon(t, cfg, Observer{})
			var ps []*jobs.Generate
			var ids []string
			for i := range 8 {
				p := &jobs.Generate{Prompt: fmt.Sprintf("Person %d as JSON:", i), MaxTokens: ptr(400), Temperature: ptr(1.0),
					Seed: ptr(int64(i)), ResponseFormat: personFormat(), Logprobs: ptr(true), TopLogprobs: ptr(2)}
				ps = append(ps, p)
				ids = append(ids, enqueue(t, b.client, p).ID)
			}
			most := 0
			for i, id := range ids {
				res, err := waitResult(t, b.client, id, nil)
				most = max(most, res.Plan.Batch)
				if err != nil {
					t.Fatalf("job %d: %v", i, err)
				}
				if res.FinishReason != jobs.FinishStop {
					t.Errorf("job %d: finish %q after %d tokens, want stop: %q", i, res.FinishReason, res.Usage.CompletionTokens, res.Text)
				}
				if err := grammartest.Validate(schema, []byte(res.Text)); err != nil {
					t.Errorf("job %d: %q: %v", i, res.Text, err)
				}
				if i == 0 {
					t.Logf("job 0: %s (%d tokens)", res.Text, res.Usage.CompletionTokens)
				}
				checkLogprobs(t, i, res, 2)
				if concurrency == 1 {
					// The same job in a session of its own, straight on the engine.
					want := engineGeneration(t, d, ps[i])
					if want.Text != res.Text || len(want.Logprobs) != len(res.Logprobs.Content) {
						t.Fatalf("job %d: engine gives %q (%d logprobs), the job %q", i, want.Text, len(want.Logprobs), res.Text)
					}
					for k, lp := range want.Logprobs {
						got := res.Logprobs.Content[k]
						if got.Logprob != float64(lp.Logprob) || len(got.TopLogprobs) != len(lp.Top) {
							t.Fatalf("job %d token %d: logprob %v (%d alternatives), engine %v (%d)", i, k, got.Logprob, len(got.TopLogprobs), lp.Logprob, len(lp.Top))
						}
						for j, alt := range lp.Top {
							if got.TopLogprobs[j].Logprob != float64(alt.Logprob) {
								t.Fatalf("job %d token %d alternative %d: %v, engine %v", i, k, j, got.TopLogprobs[j].Logprob, alt.Logprob)
							}
						}
					}
				}
			}
			if concurrency > 1 && most < 2 {
				t.Errorf("no job ran beside another (largest batch %d)", most)
			}
		})
	}
}

// TestSummarizeFormat: a summary under a JSON Schema is valid against it on the
// random-weight fixture, whose free output is noise.
func TestSummarizeFormat(t *testing.T) {
	b := setup(t)
	startDaemon(t, b.cfg, Observer{})
	schema := `{"type":"object","properties":{"points":{"type":"array","items":{"enum":["budget","vote"]},"minItems":1,"maxItems":3},"ok":{"type":"boolean"}},"required":["points","ok"],"additionalProperties":false}`
	job := enqueue(t, b.client, &jobs.Summarize{Input: "The meeting approved the budget.", MaxTokens: ptr(100),
		ResponseFormat: &jobs.ResponseFormat{Type: jobs.FormatJSONSchema, JSONSchema: &jobs.JSONSchema{Schema: json.RawMessage(schema)}}})
	res, err := waitResult(t, b.client, job.ID, nil)
	if err != nil || res.FinishReason != jobs.FinishStop || grammartest.Validate([]byte(schema), []byte(res.Text)) != nil {
		t.Fatalf("%q (finish %s): %v", res.Text, res.FinishReason, err)
	}
}

// checkLogprobs checks res's logprobs against its own text and usage.
func checkLogprobs(t *testing.T, i int, res jobs.Result, top int) {
	t.Helper()
	if res.Logprobs == nil {
		t.Fatalf("job %d: no logprobs", i)
	}
	c := res.Logprobs.Content
	if len(c) != res.Usage.CompletionTokens {
		t.Errorf("job %d: %d logprobs for %d tokens", i, len(c), res.Usage.CompletionTokens)
	}
	var text strings.Builder
	for k, lp := range c {
		for _, b := range lp.Bytes {
			text.WriteByte(byte(b))
		}
		// Fewer alternatives where the grammar allows fewer tokens (one, inside a literal).
		if !(lp.Logprob <= 0) || len(lp.TopLogprobs) < 1 || len(lp.TopLogprobs) > top {
			t.Errorf("job %d token %d: logprob %v, %d alternatives, want ≤ 0 and 1 to %d", i, k, lp.Logprob, len(lp.TopLogprobs), top)
		}
		for j := 1; j < len(lp.TopLogprobs); j++ {
			if lp.TopLogprobs[j].Logprob > lp.TopLogprobs[j-1].Logprob {
				t.Errorf("job %d token %d: alternatives out of order: %+v", i, k, lp.TopLogprobs)
			}
		}
		if len(lp.TopLogprobs) > 0 && lp.Logprob > lp.TopLogprobs[0].Logprob {
			t.Errorf("job %d token %d: logprob %v above the most likely %v", i, k, lp.Logprob, lp.TopLogprobs[0].Logprob)
		}
		if math.IsInf(lp.Logprob, 0) {
			t.Errorf("job %d token %d: drawn with probability 0", i, k)
		}
	}
	if text.String() != res.Text {
		t.Errorf("job %d: the tokens' bytes spell %q, the text is %q", i, text.String(), res.Text)
	}
}

// engineGeneration runs p on the daemon's model in a session of its own with the settings
// the worker uses.
func engineGeneration(t *testing.T, d *Daemon, p *jobs.Generate) engine.Generation {
	t.Helper()
	lm := d.w.lm
	pr, err := lm.tokenize(p)
	if err != nil {
		t.Fatal(err)
	}
	s := p.Sampling()
	smp, err := sample.New(sample.Params{Temperature: float32(s.Temperature), TopK: s.TopK, TopP: float32(s.TopP), MinP: float32(s.MinP),
		Seed: uint64(*s.Seed), RepetitionPenalty: float32(s.RepetitionPenalty)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.w.matcher(s.Format)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := lm.m.NewSession(engine.SessionOptions{Context: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	g, err := sess.Generate(context.Background(), pr.ids, engine.GenerateOptions{MaxTokens: s.MaxTokens, Sampler: smp, Grammar: m,
		Logprobs: true, TopLogprobs: s.TopLogprobs, Vocab: lm.tok, Stream: lm.tok.NewStreamDecoder()})
	if err != nil {
		t.Fatal(err)
	}
	return g
}
