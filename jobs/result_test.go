package jobs

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestEnvelope(t *testing.T) {
	t.Run("Progress", func(t *testing.T) {
		p := Progress{Phase: PhasePrefill, PromptTokens: 900, Prefilled: 512, MaxTokens: 64, UpdatedAt: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
		b := EncodeProgress(p)
		if !strings.Contains(string(b), `"type":"progress"`) {
			t.Errorf("envelope %s has no type", b)
		}
		env, err := DecodeEnvelope(b)
		if err != nil {
			t.Fatal(err)
		}
		if env.Type != EnvelopeProgress || env.Result != nil || *env.Progress != p {
			t.Errorf("got %+v", env)
		}
	})
	t.Run("Result", func(t *testing.T) {
		r := Result{Text: "hi", FinishReason: FinishLength, Usage: Usage{3, 2, 5, 1}, Plan: Plan{Context: 4096, KVPrecision: "f16"},
			Model: "m", Worker: "w", Metadata: json.RawMessage(`{"k":[1,2]}`)}
		b, err := EncodeResult(r)
		if err != nil {
			t.Fatal(err)
		}
		env, err := DecodeEnvelope(b)
		if err != nil {
			t.Fatal(err)
		}
		got := env.Result
		if env.Type != EnvelopeResult || env.Progress != nil || got.Version != 1 || got.Text != "hi" ||
			got.FinishReason != FinishLength || got.Usage != r.Usage || got.Plan != r.Plan || string(got.Metadata) != `{"k":[1,2]}` {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("IgnoresNewFields", func(t *testing.T) {
		b := `{"type":"progress","version":1,"progress":{"phase":"decode","generated":3,"eta_ms":10},"trace":"x"}`
		env, err := DecodeEnvelope([]byte(b))
		if err != nil || env.Progress.Generated != 3 {
			t.Errorf("env %+v, err %v", env, err)
		}
	})
	for _, tt := range []struct{ name, doc, want string }{
		{"Version", `{"type":"result","version":2,"result":{}}`, "version must be 1, got 2"},
		{"UnknownType", `{"type":"log","version":1}`, `type "log" must come with exactly its own field`},
		{"Mismatch", `{"type":"result","version":1,"progress":{}}`, `type "result" must come with exactly its own field`},
		{"NotJSON", `progress`, "decode job envelope: invalid character"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeEnvelope([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	t.Run("BadMetadata", func(t *testing.T) {
		if _, err := EncodeResult(Result{Metadata: json.RawMessage(`{`)}); err == nil {
			t.Error("EncodeResult accepted invalid metadata")
		}
	})
}

func TestQueues(t *testing.T) {
	for p, want := range map[Priority]string{PriorityHigh: QueueCritical, PriorityNormal: QueueDefault, "": QueueDefault, PriorityLow: QueueLow} {
		if got := QueueFor(p); got != want {
			t.Errorf("QueueFor(%q) = %q, want %q", p, got, want)
		}
	}
	w := QueueWeights()
	for _, q := range QueueNames() {
		if w[q] <= 0 {
			t.Errorf("queue %q has weight %d", q, w[q])
		}
	}
	if !(w[QueueCritical] > w[QueueDefault] && w[QueueDefault] > w[QueueLow]) {
		t.Errorf("weights %v are not ordered by priority", w)
	}
}

func TestStateDone(t *testing.T) {
	for s, want := range map[State]bool{StateCompleted: true, StateArchived: true, StateActive: false, StatePending: false, StateRetry: false} {
		if s.Done() != want {
			t.Errorf("%s.Done() = %v", s, !want)
		}
	}
}
