package jobs

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlite/batch/grammar/grammartest"
)

func ptr[T any](v T) *T { return &v }

func validGenerate() *Generate {
	return &Generate{Version: 1, Messages: []Message{{Role: RoleSystem, Content: "Be brief."}, {Role: RoleUser, Content: "Hello"}}}
}

func validSummarize() *Summarize {
	return &Summarize{Version: 1, Input: "A long document."}
}

func TestValidateGenerate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Generate)
		want string // the whole error message
	}{
		{"Version", func(g *Generate) { g.Version = 2 }, "version: must be 1, got 2"},
		{"VersionMissing", func(g *Generate) { g.Version = 0 }, "version: must be 1, got 0"},
		{"Neither", func(g *Generate) { g.Messages = nil }, "messages: one of messages or prompt is required"},
		{"Both", func(g *Generate) { g.Prompt = "x" }, "messages: give either messages or prompt, not both"},
		{"ThinkingWithPrompt", func(g *Generate) { yes := true; g.Messages, g.Prompt, g.EnableThinking = nil, "x", &yes },
			"enable_thinking: applies to messages (the chat template), not to a raw prompt"},
		{"TooManyMessages", func(g *Generate) {
			g.Messages = make([]Message, MaxMessages+1)
			for i := range g.Messages {
				g.Messages[i] = Message{Role: RoleUser, Content: "x"}
			}
		}, "messages: must have at most 1024 messages, got 1025"},
		{"Role", func(g *Generate) { g.Messages[1].Role = "tool" }, `messages[1].role: must be one of system, user, assistant, got "tool"`},
		{"SystemNotFirst", func(g *Generate) { g.Messages = append(g.Messages, Message{Role: RoleSystem, Content: "x"}) },
			"messages[2].role: system is allowed only as the first message"},
		{"NoUser", func(g *Generate) { g.Messages = g.Messages[:1] }, "messages: must contain at least one user message"},
		{"ContentUTF8", func(g *Generate) { g.Messages[1].Content = "ab\xffc" }, "messages[1].content: must be valid UTF-8: invalid byte at offset 2"},
		{"ContentTooBig", func(g *Generate) { g.Messages[1].Content = strings.Repeat("a", MaxInputBytes+1) },
			"messages[1].content: must be at most 2097152 bytes, got 2097153"},
		{"TotalTooBig", func(g *Generate) {
			g.Messages[0].Content = strings.Repeat("a", MaxInputBytes/2+1)
			g.Messages[1].Content = strings.Repeat("a", MaxInputBytes/2)
		}, "messages: total content must be at most 2097152 bytes, got 2097153"},
		{"PromptUTF8", func(g *Generate) { g.Messages = nil; g.Prompt = "\xc3" }, "prompt: must be valid UTF-8: invalid byte at offset 0"},
		{"PromptTooBig", func(g *Generate) { g.Messages = nil; g.Prompt = strings.Repeat("é", MaxInputBytes/2+1) },
			"prompt: must be at most 2097152 bytes, got 2097154"},
		{"MaxTokensZero", func(g *Generate) { g.MaxTokens = ptr(0) }, "max_tokens: must be between 1 and 32768, got 0"},
		{"MaxTokensBig", func(g *Generate) { g.MaxTokens = ptr(32769) }, "max_tokens: must be between 1 and 32768, got 32769"},
		{"Temperature", func(g *Generate) { g.Temperature = ptr(2.5) }, "temperature: must be between 0 and 2, got 2.5"},
		{"TemperatureNegative", func(g *Generate) { g.Temperature = ptr(-0.1) }, "temperature: must be between 0 and 2, got -0.1"},
		{"TopPZero", func(g *Generate) { g.TopP = ptr(0.0) }, "top_p: must be greater than 0 and at most 1, got 0"},
		{"TopPBig", func(g *Generate) { g.TopP = ptr(1.5) }, "top_p: must be greater than 0 and at most 1, got 1.5"},
		{"TopK", func(g *Generate) { g.TopK = ptr(-1) }, "top_k: must be between 0 (off) and 1000, got -1"},
		{"TopKBig", func(g *Generate) { g.TopK = ptr(1001) }, "top_k: must be between 0 (off) and 1000, got 1001"},
		{"MinP", func(g *Generate) { g.MinP = ptr(1.01) }, "min_p: must be between 0 and 1, got 1.01"},
		{"Seed", func(g *Generate) { g.Seed = ptr(int64(-1)) }, "seed: must be between 0 and 9007199254740991, got -1"},
		{"SeedBig", func(g *Generate) { g.Seed = ptr(int64(1) << 53) }, "seed: must be between 0 and 9007199254740991, got 9007199254740992"},
		{"StopCount", func(g *Generate) { g.Stop = make([]string, 17) }, "stop: must have at most 16 strings, got 17"},
		{"StopEmpty", func(g *Generate) { g.Stop = []string{"a", ""} }, "stop[1]: must not be empty"},
		{"StopLong", func(g *Generate) { g.Stop = []string{strings.Repeat("a", 257)} }, "stop[0]: must be at most 256 bytes, got 257"},
		{"StopUTF8", func(g *Generate) { g.Stop = []string{"\xff"} }, "stop[0]: must be valid UTF-8: invalid byte at offset 0"},
		{"FormatType", func(g *Generate) { g.ResponseFormat = &ResponseFormat{Type: "xml"} },
			`response_format.type: must be one of text, json_object, json_schema, got "xml"`},
		{"FormatNoType", func(g *Generate) {
			g.ResponseFormat = &ResponseFormat{JSONSchema: &JSONSchema{Schema: []byte(`{"type":"integer"}`)}}
		}, "response_format.type: is required: text, json_object or json_schema"},
		{"FormatNoSchema", func(g *Generate) { g.ResponseFormat = &ResponseFormat{Type: FormatJSONSchema} },
			"response_format.json_schema: is required when type is json_schema"},
		{"FormatSchemaOnText", func(g *Generate) {
			g.ResponseFormat = &ResponseFormat{Type: FormatText, JSONSchema: &JSONSchema{Schema: []byte(`{}`)}}
		}, `response_format.json_schema: applies to type json_schema, not "text"`},
		{"FormatSchemaNotObject", func(g *Generate) {
			g.ResponseFormat = &ResponseFormat{Type: FormatJSONSchema, JSONSchema: &JSONSchema{Schema: []byte(`[1]`)}}
		}, "response_format.json_schema.schema: must be a JSON Schema object, got array"},
		{"FormatUnsupportedKeyword", func(g *Generate) {
			g.ResponseFormat = &ResponseFormat{Type: FormatJSONSchema, JSONSchema: &JSONSchema{Name: "x",
				Schema: []byte(`{"type":"object","properties":{"a":{"type":"integer","multipleOf":3}}}`)}}
		}, `response_format.json_schema.schema: JSON Schema at #/properties/a: keyword "multipleOf" is not supported`},
		{"FormatName", func(g *Generate) {
			g.ResponseFormat = &ResponseFormat{Type: FormatJSONSchema, JSONSchema: &JSONSchema{Name: "a b", Schema: []byte(`{}`)}}
		}, `response_format.json_schema.name: may contain only A-Z a-z 0-9 _ -, got ' ' at byte 1`},
		{"FormatThinking", func(g *Generate) {
			g.ResponseFormat, g.EnableThinking = &ResponseFormat{Type: FormatJSONObject}, ptr(true)
		}, "enable_thinking: cannot be combined with a response_format other than text"},
		{"TopLogprobsBig", func(g *Generate) { g.Logprobs = ptr(true); g.TopLogprobs = ptr(21) }, "top_logprobs: must be between 0 and 20, got 21"},
		{"TopLogprobsAlone", func(g *Generate) { g.TopLogprobs = ptr(2) }, "top_logprobs: needs logprobs: true"},
		{"Presence", func(g *Generate) { g.PresencePenalty = ptr(2.5) }, "presence_penalty: must be between -2 and 2, got 2.5"},
		{"Frequency", func(g *Generate) { g.FrequencyPenalty = ptr(-3.0) }, "frequency_penalty: must be between -2 and 2, got -3"},
		{"Repetition", func(g *Generate) { g.RepetitionPenalty = ptr(0.0) }, "repetition_penalty: must be greater than 0 and at most 10 (1 is off), got 0"},
		{"NZero", func(g *Generate) { g.N = ptr(0) }, "n: must be between 1 and 8, got 0"},
		{"NNine", func(g *Generate) { g.N = ptr(9) }, "n: must be between 1 and 8, got 9"},
	}
	tests = append(tests, commonCases(func(f func(*Common)) func(*Generate) {
		return func(g *Generate) { f(&g.Common) }
	})...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := validGenerate()
			tt.edit(g)
			assertValidation(t, g.Validate(), tt.want)
		})
	}
	t.Run("ValidPasses", func(t *testing.T) {
		g := validGenerate()
		g.MaxTokens, g.Temperature, g.TopP, g.TopK, g.MinP, g.Seed = ptr(32768), ptr(0.0), ptr(1.0), ptr(0), ptr(1.0), ptr(int64(MaxSeed))
		g.Stop = []string{"\n\n", "END"}
		g.Common = Common{Model: "qwen3-next", Priority: PriorityHigh, Deadline: ptr(time.Now()), Timeout: 60,
			IdempotencyKey: "order-17:v2", Metadata: json.RawMessage(`{"a":1}`), WebhookURL: "https://example.com/hook"}
		if err := g.Validate(); err != nil {
			t.Fatal(err)
		}
		p := &Generate{Version: 1, Prompt: "Once upon"}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}

// commonCases are the checks of the fields both payload types share.
func commonCases[P any](on func(func(*Common)) func(P)) []struct {
	name string
	edit func(P)
	want string
} {
	type tc = struct {
		name string
		edit func(P)
		want string
	}
	return []tc{
		{"ModelLong", on(func(c *Common) { c.Model = strings.Repeat("m", 257) }), "model: must be at most 256 bytes, got 257"},
		{"ModelControl", on(func(c *Common) { c.Model = "a\nb" }), "model: must be printable UTF-8 text"},
		{"Priority", on(func(c *Common) { c.Priority = "urgent" }), `priority: must be one of high, normal, low, got "urgent"`},
		{"DeadlineZero", on(func(c *Common) { c.Deadline = &time.Time{} }), "deadline: must be an RFC 3339 time, got the zero time"},
		{"TimeoutNegative", on(func(c *Common) { c.Timeout = -5 }), "timeout: must be between 1 and 604800 seconds, got -5"},
		{"TimeoutBig", on(func(c *Common) { c.Timeout = 604801 }), "timeout: must be between 1 and 604800 seconds, got 604801"},
		{"IdempotencyKeyLong", on(func(c *Common) { c.IdempotencyKey = strings.Repeat("k", 129) }), "idempotency_key: must be at most 128 bytes, got 129"},
		{"IdempotencyKeyChars", on(func(c *Common) { c.IdempotencyKey = "a b" }), `idempotency_key: may contain only A-Z a-z 0-9 and . _ : -, got ' ' at byte 1`},
		{"MetadataArray", on(func(c *Common) { c.Metadata = json.RawMessage(`[1]`) }), "metadata: must be a JSON object, got array"},
		{"MetadataInvalid", on(func(c *Common) { c.Metadata = json.RawMessage(`{"a":`) }), "metadata: must be valid JSON"},
		{"MetadataBig", on(func(c *Common) { c.Metadata = json.RawMessage(`{"a":"` + strings.Repeat("x", MaxMetadataBytes) + `"}`) }),
			"metadata: must be at most 16384 bytes of JSON, got 16392"},
		{"MetadataDeep", on(func(c *Common) {
			c.Metadata = json.RawMessage(`{"a":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}`)
		}),
			"metadata: must nest at most 32 levels of objects and arrays, got 2001"},
		{"MetadataDeepObjects", on(func(c *Common) {
			c.Metadata = json.RawMessage(strings.Repeat(`{"a":`, 33) + "1" + strings.Repeat("}", 33))
		}),
			"metadata: must nest at most 32 levels of objects and arrays, got 33"},
		{"WebhookScheme", on(func(c *Common) { c.WebhookURL = "ftp://example.com/x" }), `webhook_url: scheme must be http or https, got "ftp"`},
		{"WebhookRelative", on(func(c *Common) { c.WebhookURL = "/hook" }), `webhook_url: scheme must be http or https, got ""`},
		{"WebhookNoHost", on(func(c *Common) { c.WebhookURL = "http:///x" }), "webhook_url: must have a host"},
		{"WebhookLong", on(func(c *Common) { c.WebhookURL = "https://e.com/" + strings.Repeat("a", 2048) }), "webhook_url: must be at most 2048 bytes, got 2062"},
		{"WebhookBad", on(func(c *Common) { c.WebhookURL = "http://[::1" }), `webhook_url: is not a URL: missing ']' in host`},
	}
}

func TestValidateSummarize(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Summarize)
		want string
	}{
		{"Version", func(s *Summarize) { s.Version = 0 }, "version: must be 1, got 0"},
		{"InputMissing", func(s *Summarize) { s.Input = "" }, "input: is required and must not be blank"},
		{"InputBlank", func(s *Summarize) { s.Input = " \n\t" }, "input: is required and must not be blank"},
		{"InputUTF8", func(s *Summarize) { s.Input = "abc\xe2\x82" }, "input: must be valid UTF-8: invalid byte at offset 3"},
		{"InputTooBig", func(s *Summarize) { s.Input = strings.Repeat("a", MaxInputBytes+1) }, "input: must be at most 2097152 bytes, got 2097153"},
		{"Style", func(s *Summarize) { s.Instructions = &Instructions{Style: "haiku"} },
			`instructions.style: must be one of paragraphs, bullets, one_sentence, got "haiku"`},
		{"Length", func(s *Summarize) { s.Instructions = &Instructions{Length: strings.Repeat("l", 201)} }, "instructions.length: must be at most 200 bytes, got 201"},
		{"Language", func(s *Summarize) { s.Instructions = &Instructions{Language: strings.Repeat("l", 65)} }, "instructions.language: must be at most 64 bytes, got 65"},
		{"Focus", func(s *Summarize) { s.Instructions = &Instructions{Focus: strings.Repeat("f", 2001)} }, "instructions.focus: must be at most 2000 bytes, got 2001"},
		{"FocusUTF8", func(s *Summarize) { s.Instructions = &Instructions{Focus: "\x80"} }, "instructions.focus: must be valid UTF-8: invalid byte at offset 0"},
		{"MaxTokens", func(s *Summarize) { s.MaxTokens = ptr(0) }, "max_tokens: must be between 1 and 32768, got 0"},
	}
	tests = append(tests, commonCases(func(f func(*Common)) func(*Summarize) {
		return func(s *Summarize) { f(&s.Common) }
	})...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSummarize()
			tt.edit(s)
			assertValidation(t, s.Validate(), tt.want)
		})
	}
}

func assertValidation(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	if err.Error() != want {
		t.Errorf("error:\n got %q\nwant %q", err.Error(), want)
	}
	var ve *ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, ErrBadPayload) {
		t.Errorf("error %T is not a *ValidationError matching ErrBadPayload", err)
	}
	if field, _, _ := strings.Cut(want, ": "); ve != nil && ve.Field != field && ve.Field != "" {
		t.Errorf("Field = %q, want %q", ve.Field, field)
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name, typ, doc, want string
	}{
		{"UnknownTop", TypeGenerate, `{"version":1,"prompt":"x","temprature":0.5}`,
			"temprature: unknown field (known: deadline, enable_thinking, frequency_penalty, idempotency_key, logprobs, max_tokens, messages, metadata, min_p, model, n, presence_penalty, priority, prompt, repetition_penalty, response_format, seed, stop, temperature, timeout, top_k, top_logprobs, top_p, version, webhook_url)"},
		{"UnknownNested", TypeGenerate, `{"version":1,"messages":[{"role":"user","content":"x","name":"bob"}]}`,
			"messages[0].name: unknown field (known: content, role)"},
		{"UnknownInstructions", TypeSummarize, `{"version":1,"input":"x","instructions":{"tone":"dry"}}`,
			"instructions.tone: unknown field (known: focus, language, length, style)"},
		{"WrongTypeString", TypeGenerate, `{"version":1,"messages":[{"role":1,"content":"x"}]}`, "messages[0].role: must be a string, got number"},
		{"WrongTypeInt", TypeGenerate, `{"version":1,"prompt":"x","max_tokens":"100"}`, "max_tokens: must be an integer, got string"},
		{"Fraction", TypeGenerate, `{"version":1,"prompt":"x","max_tokens":1.5}`, "max_tokens: must be an integer, got 1.5"},
		{"Huge", TypeGenerate, `{"version":1,"prompt":"x","seed":1e400}`, "seed: must be an integer, got 1e400"},
		{"WrongTypeNumber", TypeGenerate, `{"version":1,"prompt":"x","temperature":"hot"}`, "temperature: must be a number, got string"},
		{"NumberOverflow", TypeGenerate, `{"version":1,"prompt":"x","temperature":1e999}`, "temperature: must be a finite number, got 1e999"},
		{"WrongTypeArray", TypeGenerate, `{"version":1,"messages":{"role":"user"}}`, "messages: must be an array, got object"},
		{"WrongTypeStop", TypeGenerate, `{"version":1,"prompt":"x","stop":"END"}`, "stop: must be an array, got string"},
		{"WrongTypeObject", TypeSummarize, `{"version":1,"input":"x","instructions":"short"}`, "instructions: must be an object, got string"},
		{"Deadline", TypeSummarize, `{"version":1,"input":"x","deadline":"tomorrow"}`,
			`deadline: must be an RFC 3339 time like 2025-01-02T15:04:05Z, got "tomorrow"`},
		{"DeadlineType", TypeSummarize, `{"version":1,"input":"x","deadline":1700000000}`, "deadline: must be an RFC 3339 time string, got number"},
		{"TimeoutZero", TypeGenerate, `{"version":1,"prompt":"x","timeout":0}`, "timeout: must be between 1 and 604800 seconds, got 0 (leave it out for the default)"},
		{"TimeoutString", TypeSummarize, `{"version":1,"input":"x","timeout":"90s"}`, "timeout: must be an integer, got string"},
		{"NotObject", TypeSummarize, `["x"]`, "payload must be a JSON object, got array"},
		{"Syntax", TypeSummarize, `{"version":1,"input":"x",}`, "payload is not valid JSON at byte offset 25: invalid character '}' looking for beginning of object key string"},
		{"Truncated", TypeSummarize, `{"version":1,"input":"x"`, "payload is not valid JSON: unexpected end at byte offset 24"},
		{"Empty", TypeSummarize, ` `, "payload is empty; want a JSON object"},
		{"Trailing", TypeSummarize, `{"version":1,"input":"x"} {}`, "payload must be a single JSON object; data follows it at byte offset 26"},
		{"InvalidUTF8", TypeSummarize, "{\"version\":1,\"input\":\"a\xffb\"}", "payload must be valid UTF-8: invalid byte at offset 23"},
		{"Validation", TypeSummarize, `{"version":1,"input":"x","max_tokens":0}`, "max_tokens: must be between 1 and 32768, got 0"},
		{"MissingVersion", TypeSummarize, `{"input":"x"}`, "version: must be 1, got 0"},
		{"UnknownType", "translate", `{}`, `type: must be summarize or generate, got "translate"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.typ, []byte(tt.doc))
			assertValidation(t, err, tt.want)
		})
	}

	t.Run("TooBig", func(t *testing.T) {
		doc := `{"version":1,"input":"` + strings.Repeat(`\n`, MaxPayloadBytes/2) + `"}`
		_, err := DecodeSummarize([]byte(doc))
		assertValidation(t, err, "payload must be at most 8388608 bytes, got 8388632")
	})
	t.Run("NullMeansAbsent", func(t *testing.T) {
		g, err := DecodeGenerate([]byte(`{"version":1,"prompt":"x","max_tokens":null,"stop":null,"metadata":null}`))
		if err != nil {
			t.Fatal(err)
		}
		if g.MaxTokens != nil || g.Sampling().MaxTokens != DefaultGenerateMaxTokens {
			t.Errorf("max_tokens null: got %v, sampling %d", g.MaxTokens, g.Sampling().MaxTokens)
		}
	})
	t.Run("Full", func(t *testing.T) {
		doc := `{"version":1,"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],
			"max_tokens":64,"temperature":0,"top_p":0.9,"top_k":0,"min_p":0.05,"seed":42,"stop":["\n"],
			"model":"m","priority":"low","deadline":"2030-01-02T03:04:05+02:00","timeout":120,
			"idempotency_key":"k-1","metadata":{"customer":7},"webhook_url":"http://h/x"}`
		g, err := DecodeGenerate([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		s := g.Sampling()
		if s.MaxTokens != 64 || s.Temperature != 0 || s.TopP != 0.9 || s.TopK != 0 || s.MinP != 0.05 || *s.Seed != 42 || s.Stop[0] != "\n" {
			t.Errorf("sampling = %+v", s)
		}
		o := g.Options()
		want := time.Date(2030, 1, 2, 1, 4, 5, 0, time.UTC)
		if o.Priority != PriorityLow || o.Timeout != 120 || !o.Deadline.Equal(want) || string(o.Metadata) != `{"customer":7}` {
			t.Errorf("options = %+v", o)
		}
	})
}

func TestSamplingDefaults(t *testing.T) {
	g := &Generate{Version: 1, Prompt: "x"}
	want := Sampling{MaxTokens: DefaultGenerateMaxTokens, Temperature: DefaultTemperature, TopP: DefaultTopP, TopK: DefaultTopK, MinP: DefaultMinP}
	if got := g.Sampling(); got.MaxTokens != want.MaxTokens || got.Temperature != want.Temperature || got.TopP != want.TopP ||
		got.TopK != want.TopK || got.MinP != want.MinP || got.Seed != nil || got.Stop != nil {
		t.Errorf("generate defaults = %+v, want %+v", got, want)
	}
	s := &Summarize{Version: 1, Input: "x"}
	if got := s.Sampling(); got.MaxTokens != DefaultSummarizeMaxTokens || got.Temperature != DefaultTemperature {
		t.Errorf("summarize defaults = %+v", got)
	}
}

func TestEncodePayload(t *testing.T) {
	t.Run("RoundTrip", func(t *testing.T) {
		in := validGenerate()
		in.Version = 0 // EncodePayload fills it in
		in.MaxTokens = ptr(10)
		in.Metadata = json.RawMessage(`{"k":"v"}`)
		b, err := EncodePayload(in)
		if err != nil {
			t.Fatal(err)
		}
		if in.Version != 0 {
			t.Error("EncodePayload changed its argument")
		}
		out, err := DecodeGenerate(b)
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if out.Version != 1 || *out.MaxTokens != 10 || len(out.Messages) != 2 || string(out.Metadata) != `{"k":"v"}` {
			t.Errorf("round trip: %s", b)
		}
	})
	t.Run("Invalid", func(t *testing.T) {
		_, err := EncodePayload(&Summarize{Input: " "})
		assertValidation(t, err, "input: is required and must not be blank")
	})
	t.Run("Nil", func(t *testing.T) {
		if _, err := EncodePayload(nil); !errors.Is(err, ErrBadPayload) {
			t.Errorf("err = %v", err)
		}
	})
}

// TestMetadataDepthAccepted: nesting up to MaxMetadataDepth passes, and brackets inside
// strings (escaped quotes included) are text, not nesting.
func TestMetadataDepthAccepted(t *testing.T) {
	for _, m := range []string{
		strings.Repeat(`{"a":`, MaxMetadataDepth) + "1" + strings.Repeat("}", MaxMetadataDepth),
		`{"s":"` + strings.Repeat("[{", 100) + `","q":"\"[[[[","b":"\\"}`,
	} {
		g := &Generate{Version: Version, Prompt: "x", Common: Common{Metadata: json.RawMessage(m)}}
		if err := g.Validate(); err != nil {
			t.Errorf("metadata %.60s…: %v", m, err)
		}
	}
}

// BenchmarkValidateSchema is the cost a json_schema adds at submit: Validate compiles the
// schema (grammartest's person schema: patterns, formats, enums, bounds), once per distinct
// format (cold: the description differs every time), then remembers the answer (warm).
func BenchmarkValidateSchema(b *testing.B) {
	for _, warm := range []bool{false, true} {
		b.Run(map[bool]string{false: "cold", true: "warm"}[warm], func(b *testing.B) {
			g := validGenerate()
			js := &JSONSchema{Schema: []byte(grammartest.Schemas["person"])}
			g.ResponseFormat = &ResponseFormat{Type: FormatJSONSchema, JSONSchema: js}
			i := 0
			for b.Loop() {
				if !warm {
					i++
					js.Description = strconv.Itoa(i)
				}
				if err := g.Validate(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
