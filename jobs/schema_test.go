package jobs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// schemaDocs loads every embedded schema once per test.
type schemaDocs map[string]map[string]any

func loadSchemas(t *testing.T) schemaDocs {
	t.Helper()
	docs := schemaDocs{}
	for _, name := range SchemaNames() {
		b, err := Schema(name)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber() // compare limits exactly, not as float64
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema = %v, want draft 2020-12", name, m["$schema"])
		}
		if id, _ := m["$id"].(string); !strings.HasSuffix(id, "/"+name) {
			t.Errorf("%s: $id = %q does not end in its file name", name, id)
		}
		docs[name] = m
	}
	return docs
}

// resolve follows $ref (within a file, or to a sibling file) and returns the node and the
// file it lives in. A "type" beside a $ref is kept.
func (d schemaDocs) resolve(t *testing.T, file string, node map[string]any) (string, map[string]any) {
	t.Helper()
	for range 10 {
		ref, ok := node["$ref"].(string)
		if !ok {
			return file, node
		}
		outerType := node["type"]
		target, pointer, _ := strings.Cut(ref, "#")
		if target != "" {
			file = target
		}
		doc, ok := d[file]
		if !ok {
			t.Fatalf("%s: $ref %q names a schema that does not exist", file, ref)
		}
		cur := any(doc)
		for _, part := range strings.Split(strings.Trim(pointer, "/"), "/") {
			if part == "" {
				continue
			}
			m, _ := cur.(map[string]any)
			cur = m[part]
		}
		next, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("%s: $ref %q does not resolve", file, ref)
		}
		if outerType != nil {
			if next["type"] != nil && next["type"] != outerType {
				t.Fatalf("%s: $ref %q: type %v beside it disagrees with the target's %v", file, ref, outerType, next["type"])
			}
		}
		node = next
	}
	t.Fatalf("%s: $ref chain too long", file)
	return "", nil
}

func jsonTypeOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return "string"
	case t == rawType:
		return "object" // metadata: the only raw field, an object
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		return "array"
	case reflect.Struct:
		return "object"
	}
	return "unknown " + t.String()
}

// agree checks that the schema node describes Go type typ: the same JSON type, and for
// objects the same property names, the same required list (the fields without omitempty),
// recursively.
func (d schemaDocs) agree(t *testing.T, file string, node map[string]any, typ reflect.Type, path string) {
	t.Helper()
	outerType := node["type"]
	file, node = d.resolve(t, file, node)
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := jsonTypeOf(typ)
	got := node["type"]
	if got == nil {
		got = outerType
	}
	if got != want {
		t.Errorf("%s %s: schema type %v, Go type %v is %s", file, path, got, typ, want)
		return
	}
	switch {
	case typ == timeType:
		if node["format"] != "date-time" {
			t.Errorf("%s %s: a time must have format date-time, got %v", file, path, node["format"])
		}
	case typ.Kind() == reflect.Slice && typ != rawType:
		items, ok := node["items"].(map[string]any)
		if !ok {
			t.Errorf("%s %s: array without items", file, path)
			return
		}
		d.agree(t, file, items, typ.Elem(), path+"[]")
	case typ.Kind() == reflect.Struct && typ != rawType:
		props, _ := node["properties"].(map[string]any)
		fields := jsonFields(typ)
		for name, f := range fields {
			p, ok := props[name].(map[string]any)
			if !ok {
				t.Errorf("%s %s: Go field %q is not in the schema's properties", file, path, name)
				continue
			}
			d.agree(t, file, p, f.Type, join(path, name))
		}
		for name := range props {
			if _, ok := fields[name]; !ok {
				t.Errorf("%s %s: schema property %q has no Go field in %v", file, path, name, typ)
			}
		}
		var wantReq, gotReq []string
		for name, f := range fields {
			if !f.OmitEmpty {
				wantReq = append(wantReq, name)
			}
		}
		if req, ok := node["required"].([]any); ok {
			for _, r := range req {
				gotReq = append(gotReq, r.(string))
			}
		}
		sort.Strings(wantReq)
		sort.Strings(gotReq)
		if !slices.Equal(wantReq, gotReq) {
			t.Errorf("%s %s: required = %v, Go fields without omitempty = %v", file, path, gotReq, wantReq)
		}
	}
}

func TestSchemasAgreeWithStructs(t *testing.T) {
	docs := loadSchemas(t)
	for _, tt := range []struct {
		file string
		v    any
	}{
		{SchemaGenerate, Generate{}},
		{SchemaSummarize, Summarize{}},
		{SchemaResult, Result{}},
		{SchemaProgress, Progress{}},
		{SchemaEnvelope, Envelope{}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			docs.agree(t, tt.file, docs[tt.file], reflect.TypeOf(tt.v), "")
		})
	}
	if got, want := SchemaNames(), []string{SchemaEnvelope, SchemaGenerate, SchemaProgress, SchemaResult, SchemaSummarize}; !slices.Equal(got, want) {
		t.Errorf("SchemaNames() = %v, want %v", got, want)
	}
	if _, err := Schema("nope.json"); err == nil {
		t.Error("Schema(nope.json) did not fail")
	}
}

// TestSchemaLimits checks that the numbers and enums in the schemas are the ones Validate
// enforces and the defaults Sampling applies.
func TestSchemaLimits(t *testing.T) {
	docs := loadSchemas(t)
	at := func(file, pointer, key string) any {
		t.Helper()
		node := map[string]any(docs[file])
		for _, part := range strings.Split(pointer, "/") {
			_, node = docs.resolve(t, file, node)
			next, ok := node[part].(map[string]any)
			if !ok {
				t.Fatalf("%s: no %s", file, pointer)
			}
			node = next
		}
		_, node = docs.resolve(t, file, node)
		return node[key]
	}
	num := func(v any) string { return fmt.Sprint(v) }
	for _, c := range []struct {
		file, pointer, key string
		want               any
	}{
		{SchemaGenerate, "properties/max_tokens", "maximum", MaxMaxTokens},
		{SchemaGenerate, "properties/max_tokens", "default", DefaultGenerateMaxTokens},
		{SchemaGenerate, "properties/temperature", "maximum", MaxTemperature},
		{SchemaGenerate, "properties/temperature", "default", DefaultTemperature},
		{SchemaGenerate, "properties/top_p", "default", DefaultTopP},
		{SchemaGenerate, "properties/top_k", "maximum", MaxTopK},
		{SchemaGenerate, "properties/top_k", "default", DefaultTopK},
		{SchemaGenerate, "properties/min_p", "default", DefaultMinP},
		{SchemaGenerate, "properties/seed", "maximum", int64(MaxSeed)},
		{SchemaGenerate, "properties/stop", "maxItems", MaxStop},
		{SchemaGenerate, "properties/stop/items", "maxLength", MaxStopBytes},
		{SchemaGenerate, "properties/messages", "maxItems", MaxMessages},
		{SchemaGenerate, "properties/prompt", "maxLength", MaxInputBytes},
		{SchemaGenerate, "properties/model", "maxLength", MaxModelBytes},
		{SchemaGenerate, "properties/timeout", "maximum", MaxTimeoutSeconds},
		{SchemaGenerate, "properties/webhook_url", "maxLength", MaxWebhookURLBytes},
		{SchemaGenerate, "properties/idempotency_key", "pattern", fmt.Sprintf("^[A-Za-z0-9._:-]{1,%d}$", MaxIdempotencyKeyLen)},
		{SchemaSummarize, "properties/input", "maxLength", MaxInputBytes},
		{SchemaSummarize, "properties/max_tokens", "default", DefaultSummarizeMaxTokens},
		{SchemaSummarize, "properties/max_tokens", "maximum", MaxMaxTokens},
		{SchemaSummarize, "properties/instructions/properties/length", "maxLength", MaxInstructionLength},
		{SchemaSummarize, "properties/instructions/properties/language", "maxLength", MaxInstructionLang},
		{SchemaSummarize, "properties/instructions/properties/focus", "maxLength", MaxInstructionFocus},
		{SchemaSummarize, "properties/overlap", "maximum", MaxOverlap},
		{SchemaSummarize, "properties/part/properties/level", "maximum", MaxLevels - 1},
		{SchemaSummarize, "properties/part/properties/pieces", "maximum", MaxPieces},
		{SchemaSummarize, "properties/part/properties/parent", "maxLength", MaxParentIDBytes},
	} {
		if got := at(c.file, c.pointer, c.key); num(got) != num(c.want) {
			t.Errorf("%s %s %s = %v, want %v", c.file, c.pointer, c.key, got, c.want)
		}
	}
	enum := func(file, pointer string) []string {
		var out []string
		for _, v := range at(file, pointer, "enum").([]any) {
			out = append(out, v.(string))
		}
		return out
	}
	for _, c := range []struct {
		file, pointer string
		want          []string
	}{
		{SchemaGenerate, "properties/priority", []string{string(PriorityHigh), string(PriorityNormal), string(PriorityLow)}},
		{SchemaGenerate, "$defs/message/properties/role", []string{RoleSystem, RoleUser, RoleAssistant}},
		{SchemaSummarize, "properties/instructions/properties/style", []string{StyleParagraphs, StyleBullets, StyleOneSentence}},
		{SchemaResult, "properties/finish_reason", []string{string(FinishStop), string(FinishLength), string(FinishCancelled)}},
		{SchemaProgress, "properties/phase", []string{string(PhaseQueued), string(PhaseTokenizing), string(PhasePlanning),
			string(PhasePrefill), string(PhaseDecode), string(PhaseDone), string(PhaseMap), string(PhaseReduce)}},
		{SchemaSummarize, "properties/strategy", []string{string(StrategyAuto), string(StrategySingle), string(StrategyHierarchical)}},
		{SchemaEnvelope, "properties/type", []string{string(EnvelopeProgress), string(EnvelopeResult)}},
	} {
		if got := enum(c.file, c.pointer); !slices.Equal(got, c.want) {
			t.Errorf("%s %s enum = %v, want %v", c.file, c.pointer, got, c.want)
		}
	}
}
