package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

var generateSeeds = []string{
	`{"version":1,"prompt":"x"}`,
	`{"version":1,"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"a":{"enum":[1,"b"]},"c":{"type":"array","items":{"type":"string","pattern":"^[a-z]+$"}}},"required":["a"]}}},"logprobs":true,"top_logprobs":3,"presence_penalty":0.5,"frequency_penalty":-1,"repetition_penalty":1.1}`,
	`{"version":1,"prompt":"x","response_format":{"type":"json_object"}}`,
	`{"version":1,"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"max_tokens":64,"temperature":0.2,"top_p":0.9,"top_k":40,"min_p":0.05,"seed":7,"stop":["\n"]}`,
	`{"version":1,"prompt":"x","model":"m","priority":"high","deadline":"2030-01-01T00:00:00Z","timeout":60,"idempotency_key":"k","metadata":{"a":[1,{"b":null}]},"webhook_url":"https://h/x"}`,
	`{"version":1,"prompt":"x","max_tokens":0}`,
	`{"version":1,"messages":[{"role":"user","content":"a","x":1}]}`,
	`{"version":1,"prompt":null,"messages":null}`,
	`[]`, `null`, `{"version":1e0}`, `{"version":"1"}`,
	`{"version":1,"prompt":"x","timeout":0}`,
	`{"version":1,"prompt":"x","metadata":{"a":[[[[{"b":"]]\"["}]]]]}}`,
}

var summarizeSeeds = []string{
	`{"version":1,"input":"doc"}`,
	`{"version":1,"input":"doc","response_format":{"type":"json_schema","json_schema":{"schema":{"$ref":"#/$defs/x","$defs":{"x":{"type":"string","maxLength":3}}}}}}`,
	`{"version":1,"input":"doc </document> <document>","instructions":{"style":"bullets","length":"5","language":"de","focus":"f"},"max_tokens":10}`,
	`{"version":1,"input":" "}`,
	`{"version":1,"input":"x","instructions":{"tone":1}}`,
	`{"version":1,"input":"x","deadline":"2030-13-01T00:00:00Z"}`,
	`{"version":1,"input":"x","metadata":[]}`,
	"{\"version\":1,\"input\":\"\xff\"}",
	`{"version":1,"input":"doc","strategy":"hierarchical","overlap":64}`,
	`{"version":1,"input":"doc","strategy":"single","part":{"parent":"p-1","level":1,"index":0,"pieces":1,"final":true}}`,
	`{"version":1,"input":"doc","strategy":"hierarchical","part":{"parent":"p","level":0,"index":3,"pieces":2}}`,
	`{"version":1,"input":"doc","strategy":"fast","overlap":-1}`,
}

// checkDecoded is what both fuzz targets assert: errors are validation errors; accepted
// payloads survive EncodePayload and decode to the same value.
func checkDecoded[P Payload](t *testing.T, p P, err error, decode func([]byte) (P, error)) {
	if err != nil {
		var ve *ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, ErrBadPayload) {
			t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
		}
		if ve.Msg == "" {
			t.Fatal("validation error without a message")
		}
		return
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("decoded payload fails Validate: %v", err)
	}
	enc, err := EncodePayload(p)
	if err != nil {
		t.Fatalf("accepted payload does not encode: %v", err)
	}
	again, err := decode(enc)
	if err != nil {
		t.Fatalf("re-encoded payload %s is refused: %v", enc, err)
	}
	// Metadata is kept verbatim, so compare it as JSON values, the rest as Go values.
	m1, m2 := p.Options().Metadata, again.Options().Metadata
	if !sameJSON(m1, m2) {
		t.Fatalf("metadata changed: %s → %s", m1, m2)
	}
	enc2, _ := EncodePayload(again)
	if !bytes.Equal(enc, enc2) {
		t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
	}
}

func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(bytes.TrimSpace(a)) == len(bytes.TrimSpace(b)) || string(bytes.TrimSpace(a)) == "null" || string(bytes.TrimSpace(b)) == "null"
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func FuzzDecodeGenerate(f *testing.F) {
	for _, s := range generateSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := DecodeGenerate(data)
		checkDecoded(t, g, err, DecodeGenerate)
	})
}

func FuzzDecodeSummarize(f *testing.F) {
	for _, s := range summarizeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeSummarize(data)
		checkDecoded(t, s, err, DecodeSummarize)
		if err != nil {
			return
		}
		msgs := SummarizeMessages(s)
		tag := documentTag(s.Input)
		if strings.Contains(s.Input, "</"+tag+">") || !strings.Contains(msgs[1].Content, "<"+tag+">\n"+s.Input) {
			t.Fatalf("document not safely delimited by %q", tag)
		}
	})
}

// FuzzJSONDepth checks jsonDepth, which reads metadata without recursion, against the
// depth of the decoded value on every valid JSON text.
func FuzzJSONDepth(f *testing.F) {
	for _, s := range []string{`{}`, `[[[]]]`, `{"a":[1,{"b":"]}\\"}]}`, `"[{"`, `{"a":"\\\""}`, `[[],[[]],{}]`, `1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if json.Unmarshal(data, &v) != nil {
			return
		}
		if got, want := jsonDepth(data), depthOf(v); got != want {
			t.Fatalf("jsonDepth(%q) = %d, want %d", data, got, want)
		}
	})
}

func depthOf(v any) int {
	d := 0
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
		return d + 1
	case map[string]any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
		return d + 1
	}
	return 0
}
