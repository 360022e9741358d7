package jobs

import (
	"encoding/json"
	"math"
	"strings"
	"sync"

	"github.com/redlite/batch/grammar"
)

// ResponseFormat is OpenAI's response_format: the shape the output must have. Workers enforce
// it while they generate (a grammar masks every token that would leave the shape), so a
// format is never ignored: one the grammar cannot express is refused when the job is
// submitted.
type ResponseFormat struct {
	// Type is text (no constraint), json_object (any JSON object) or json_schema
	// (JSONSchema.Schema); required, as OpenAI's.
	Type       string      `json:"type"`
	JSONSchema *JSONSchema `json:"json_schema,omitempty"`
}

// JSONSchema is response_format's json_schema member, as OpenAI names its fields.
type JSONSchema struct {
	// Name is the schema's name (OpenAI requires one; here it is optional and only echoed).
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
	// Schema is a JSON Schema object; the subset the grammar supports is in engine/README.md.
	Schema json.RawMessage `json:"schema,omitempty"`
	// Strict is accepted for OpenAI's clients; the schema is enforced either way.
	Strict *bool `json:"strict,omitempty"`
}

// Response format types.
const (
	FormatText       = "text"
	FormatJSONObject = "json_object"
	FormatJSONSchema = "json_schema"
)

// Limits of the response format, logprobs and penalties.
const (
	// MaxSchemaBytes bounds response_format.json_schema.schema: extraction schemas are a
	// few KiB; each one is compiled at submit and again on the worker.
	MaxSchemaBytes     = 64 << 10
	MaxSchemaNameBytes = 64
	// MaxTopLogprobs is OpenAI's bound, and the engine's.
	MaxTopLogprobs       = 20
	MaxAbsPenalty        = 2.0  // presence_penalty and frequency_penalty, OpenAI's range
	MaxRepetitionPenalty = 10.0 // llama.cpp's penalty_repeat; 1 is off
	// MaxN bounds a generate payload's n: the choices share one prefill, and each holds a
	// sequence of its own while it decodes.
	MaxN = 8
)

// Grammar returns the grammar f asks for, nil for text (or a nil f). Its error names the
// field, and for a schema the keyword, that the grammar cannot enforce.
func (f *ResponseFormat) Grammar() (*grammar.Grammar, error) {
	if f == nil {
		return nil, nil
	}
	switch f.Type {
	case "":
		// Never read a format without a type as text: that would ignore a schema.
		return nil, invalid("response_format.type", "is required: text, json_object or json_schema")
	case FormatText:
		if f.JSONSchema != nil {
			return nil, invalid("response_format.json_schema", "applies to type json_schema, not %q", f.Type)
		}
		return nil, nil
	case FormatJSONObject:
		if f.JSONSchema != nil {
			return nil, invalid("response_format.json_schema", "applies to type json_schema, not json_object")
		}
		return grammar.JSONObject(), nil
	case FormatJSONSchema:
	default:
		return nil, invalid("response_format.type", "must be one of text, json_object, json_schema, got %q", clip(f.Type))
	}
	js := f.JSONSchema
	if js == nil {
		return nil, invalid("response_format.json_schema", "is required when type is json_schema")
	}
	if len(js.Name) > MaxSchemaNameBytes {
		return nil, invalid("response_format.json_schema.name", "must be at most %d bytes, got %d", MaxSchemaNameBytes, len(js.Name))
	}
	for i := 0; i < len(js.Name); i++ {
		if b := js.Name[i]; !(idKeyByte(b) && b != '.' && b != ':') {
			return nil, invalid("response_format.json_schema.name", "may contain only A-Z a-z 0-9 _ -, got %q at byte %d", b, i)
		}
	}
	if err := checkText("response_format.json_schema.description", js.Description, MaxSchemaBytes); err != nil {
		return nil, err
	}
	if len(js.Schema) > MaxSchemaBytes {
		return nil, invalid("response_format.json_schema.schema", "must be at most %d bytes of JSON, got %d", MaxSchemaBytes, len(js.Schema))
	}
	if k := jsonKind(js.Schema); k != "object" {
		return nil, invalid("response_format.json_schema.schema", "must be a JSON Schema object, got %s", k)
	}
	g, err := grammar.FromJSONSchema(js.Schema)
	if err != nil {
		// The field names where the error is; "grammar: " would name our package.
		return nil, invalid("response_format.json_schema.schema", "%s", strings.TrimPrefix(err.Error(), "grammar: "))
	}
	return g, nil
}

// Program compiles f's grammar: nil for text. Workers call it once per job (and may share
// the Program between jobs with the same format); Validate calls it at submit.
func (f *ResponseFormat) Program() (*grammar.Program, error) {
	g, err := f.Grammar()
	if err != nil || g == nil {
		return nil, err
	}
	p, err := grammar.Compile(g)
	if err != nil {
		return nil, invalid("response_format", "%s", strings.TrimPrefix(err.Error(), "grammar: "))
	}
	return p, nil
}

// validateSampling checks the logprobs and penalty fields of a generate payload.
func (g *Generate) validateSampling() error {
	if v := g.TopLogprobs; v != nil {
		if *v < 0 || *v > MaxTopLogprobs {
			return invalid("top_logprobs", "must be between 0 and %d, got %d", MaxTopLogprobs, *v)
		}
		if *v > 0 && (g.Logprobs == nil || !*g.Logprobs) {
			return invalid("top_logprobs", "needs logprobs: true")
		}
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"presence_penalty", g.PresencePenalty}, {"frequency_penalty", g.FrequencyPenalty}} {
		if f.v != nil && !(math.Abs(*f.v) <= MaxAbsPenalty) {
			return invalid(f.name, "must be between %g and %g, got %g", -MaxAbsPenalty, MaxAbsPenalty, *f.v)
		}
	}
	if v := g.RepetitionPenalty; v != nil && !(*v > 0 && *v <= MaxRepetitionPenalty) {
		return invalid("repetition_penalty", "must be greater than 0 and at most %g (1 is off), got %g", MaxRepetitionPenalty, *v)
	}
	if v := g.N; v != nil && (*v < 1 || *v > MaxN) {
		return invalid("n", "must be between 1 and %d, got %d", MaxN, *v)
	}
	return nil
}

// validateFormat compiles f, so that a schema the workers cannot enforce is refused at
// submit, naming the keyword. The answers for recent schemas are kept: a batch's lines
// usually share one, and each line is validated more than once (parse, then Enqueue).
func validateFormat(f *ResponseFormat) error {
	if f == nil || f.Type == FormatText && f.JSONSchema == nil {
		return nil
	}
	key, err := json.Marshal(f)
	if err != nil {
		return invalid("response_format", "%v", err)
	}
	checked.mu.Lock()
	prev, ok := checked.m[string(key)]
	checked.mu.Unlock()
	if ok {
		return prev
	}
	_, err = f.Program()
	checked.mu.Lock()
	if checked.m == nil || len(checked.m) >= maxCheckedFormats {
		checked.m = map[string]error{}
	}
	checked.m[string(key)] = err
	checked.mu.Unlock()
	return err
}

// maxCheckedFormats bounds the formats whose answer validateFormat keeps (at most
// MaxSchemaBytes each).
const maxCheckedFormats = 64

var checked struct {
	mu sync.Mutex
	m  map[string]error
}
