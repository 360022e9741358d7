package api

import (
	"bytes"
	"strings"
	"testing"

	"github.com/redlite/batch/jobs"
)

// Fuzz targets of every parser of outside input: request bodies, batch files, token files.

func FuzzParseJobRequest(f *testing.F) {
	f.Add([]byte(`{"type":"generate","version":1,"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`), "")
	f.Add([]byte(`{"type":"summarize","version":1,"input":"doc","instructions":{"style":"bullets"}}`), "key-1")
	f.Add([]byte(`{"type":"generate","version":1,"prompt":"x","idempotency_key":"a"}`), "b")
	f.Add([]byte(`{"type":1}`), "")
	f.Add([]byte(`[{"type":"generate"}]`), "")
	f.Add([]byte(`{"type":"generate","type":"summarize","version":1,"input":"x"}`), "")
	f.Add([]byte(`{"type":"generate","version":1,"prompt":"x","timeout":0}`), "")
	f.Add([]byte(`{"type":"generate","version":1,"prompt":"x","metadata":{"a":`+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`}}`), "")
	f.Fuzz(func(t *testing.T, body []byte, idem string) {
		p, err := ParseJobRequest(body, idem)
		if !checkParsed(t, body, p, err) {
			return
		}
		if _, err := jobs.EncodePayload(p); err != nil {
			t.Fatalf("accepted %q that does not encode: %v", body, err)
		}
	})
}

func FuzzParseChatRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":5,"stop":"x","stream":true,"stream_options":{"include_usage":true}}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}],"n":2}`))
	f.Add([]byte(`{"messages":[{"role":"tool","content":"x"}],"tools":[]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"max_completion_tokens":4,"metadata":{"a":"b"},"seed":7}`))
	f.Add([]byte(`{"messages":null}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}],"stream":false,"stream_options":{"include_usage":true}}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}],"stream_options":null}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}}},"logprobs":true,"top_logprobs":2,"top_k":5,"min_p":0.1,"presence_penalty":1,"frequency_penalty":1,"repetition_penalty":1.2}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object","extra":1}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		g, _, err := ParseChatRequest(body)
		checkParsed(t, body, g, err)
	})
}

// checkParsed fails the fuzz run for a request refused with another status than 400, or
// accepted with an invalid payload; it reports whether the request was accepted.
func checkParsed[P jobs.Payload](t *testing.T, body []byte, p P, err error) bool {
	if err != nil {
		if asAPIError(err).status != 400 {
			t.Fatalf("status %d for %q: %v", asAPIError(err).status, body, err)
		}
		return false
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("accepted an invalid request %q: %v", body, err)
	}
	return true
}

func FuzzParseCompletionRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt":"Once","max_tokens":5,"stop":["x"],"n":3,"logprobs":2,"seed":1,"temperature":0.5,"stream":true,"stream_options":{"include_usage":true}}`))
	f.Add([]byte(`{"prompt":["one"],"echo":false,"suffix":"","best_of":1}`))
	f.Add([]byte(`{"prompt":["a","b"]}`))
	f.Add([]byte(`{"prompt":[[1,2]],"echo":true}`))
	f.Add([]byte(`{"prompt":"","n":9,"logprobs":21}`))
	f.Add([]byte(`{"prompt":"x","response_format":{"type":"json_object"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		g, _, err := ParseCompletionRequest(body)
		if checkParsed(t, body, g, err) && (g.Prompt == "" || len(g.Messages) > 0) {
			t.Fatalf("a completion %q became %+v", body, g)
		}
	})
}

func FuzzParseResponseRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":"hi","instructions":"be brief","max_output_tokens":5,"temperature":0,"top_p":0.9,"stream":true,"metadata":{"a":"b"},"store":false}`))
	f.Add([]byte(`{"input":[{"role":"system","content":"s"},{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},{"role":"assistant","content":[{"type":"output_text","text":"yo"}]}],"instructions":"i"}`))
	f.Add([]byte(`{"input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},"strict":true}}}`))
	f.Add([]byte(`{"input":"x","text":{"format":{"type":"json_object","extra":1}}}`))
	f.Add([]byte(`{"input":[{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[],"previous_response_id":"r","truncation":"auto"}`))
	f.Add([]byte(`{"instructions":"only"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		g, _, err := ParseResponseRequest(body)
		if checkParsed(t, body, g, err) && (len(g.Messages) == 0 || g.Prompt != "") {
			t.Fatalf("a response request %q became %+v", body, g)
		}
	})
}

func FuzzParseBatchInput(f *testing.F) {
	good := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}`
	f.Add([]byte(good + "\n" + strings.Replace(good, `"a"`, `"b"`, 1) + "\n"))
	f.Add([]byte(good + "\r\n\r\n" + good))
	f.Add([]byte("not json\n{}\n[1]\n"))
	f.Add([]byte(`{"custom_id":"a","method":"GET","url":"/v1/embeddings","body":[],"extra":1}`))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, data []byte) {
		lines, errs := ParseBatchInput(data, chatEndpoint)
		if (len(lines) == 0) == (len(errs) == 0) {
			t.Fatalf("%d lines and %d errors for %q", len(lines), len(errs), data)
		}
		if len(errs) > maxBatchErrors+1 {
			t.Fatalf("%d errors", len(errs))
		}
		seen := map[string]bool{}
		last := 0
		for _, l := range lines {
			if seen[l.CustomID] || l.CustomID == "" || l.Line <= last || len(l.Body) == 0 || l.Body[0] != '{' {
				t.Fatalf("bad line %+v in %q", l, data)
			}
			seen[l.CustomID], last = true, l.Line
		}
		for _, e := range errs {
			if e.Message == "" || e.Code == "" {
				t.Fatalf("empty error %+v", e)
			}
		}
	})
}

func FuzzParseTokensFile(f *testing.F) {
	f.Add([]byte("# tokens\nplain-token alice\nsha256:" + strings.Repeat("ab", 32) + " bob\n\n"))
	f.Add([]byte("sha256:xyz\n"))
	f.Add([]byte("sha256:" + strings.Repeat("0", 63)))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := parseTokensFile(data)
		if err == nil {
			return
		}
		// The error names the line, never its content: it may be a token.
		for _, line := range bytes.Split(data, []byte("\n")) {
			tok, _, _ := strings.Cut(strings.TrimSpace(string(line)), " ")
			if len(tok) >= 12 && strings.Contains(err.Error(), tok) {
				t.Fatalf("error %q quotes the file", err)
			}
		}
	})
}
