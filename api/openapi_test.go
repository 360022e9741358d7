package api_test

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
)

type openAPIDoc struct {
	OpenAPI string                                `json:"openapi"`
	Paths   map[string]map[string]json.RawMessage `json:"paths"`
	Comps   struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		} `json:"schemas"`
	} `json:"components"`
}

// TestOpenAPI checks the document against the handlers: every operation answers with one of
// the statuses it lists (never "no route"), and what the handlers write has the fields the
// document's schemas name.
func TestOpenAPI(t *testing.T) {
	b := setup(t, setupOpts{noDaemon: true})
	code, data := b.call(t, "", "GET", "/v1/openapi.json", nil)
	var doc openAPIDoc
	if code != http.StatusOK || json.Unmarshal(data, &doc) != nil || doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi.json: %d %.200s", code, data)
	}
	if len(doc.Paths) < 10 {
		t.Fatalf("only %d paths", len(doc.Paths))
	}
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			var op struct {
				Responses map[string]json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			m := strings.ToUpper(method)
			var body any
			if m == "POST" {
				body = "{}"
			}
			code, data := b.call(t, tokenA, m, strings.ReplaceAll(path, "{id}", "nope"), body)
			if _, ok := op.Responses[strconv.Itoa(code)]; !ok {
				t.Errorf("%s %s: status %d is not among the documented %v: %.200s", m, path, code, keys(op.Responses), data)
			}
			if code, _ := b.call(t, "", m, strings.ReplaceAll(path, "{id}", "nope"), body); code != http.StatusUnauthorized {
				t.Errorf("%s %s without a token: %d, want 401", m, path, code)
			}
		}
	}

	// The fields of real responses against their schemas.
	check := func(schema string, data []byte) {
		t.Helper()
		var got map[string]json.RawMessage
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("%s: %v: %s", schema, err, data)
		}
		s, ok := doc.Comps.Schemas[schema]
		if !ok {
			t.Fatalf("no schema %s", schema)
		}
		for k := range got {
			if _, ok := s.Properties[k]; !ok {
				t.Errorf("%s: field %q is not in the schema", schema, k)
			}
		}
		for _, k := range s.Required {
			if _, ok := got[k]; !ok {
				t.Errorf("%s: required field %q is missing: %s", schema, k, data)
			}
		}
	}
	code, data = b.call(t, tokenA, "POST", "/v1/jobs", generate(2))
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/jobs: %d %s", code, data)
	}
	check("Job", data)
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	fw.Write([]byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}` + "\n"))
	mw.Close()
	code, data = b.call(t, tokenA, "POST", "/v1/files", form.Bytes(), "Content-Type", mw.FormDataContentType())
	if code != http.StatusOK {
		t.Fatalf("POST /v1/files: %d %s", code, data)
	}
	check("File", data)
	var f struct{ ID string }
	json.Unmarshal(data, &f)
	code, data = b.call(t, tokenA, "POST", "/v1/batches", map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions", "completion_window": "24h"})
	if code != http.StatusOK {
		t.Fatalf("POST /v1/batches: %d %s", code, data)
	}
	check("Batch", data)
	_, data = b.call(t, tokenA, "POST", "/v1/jobs", "{")
	check("ErrorBody", data)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
