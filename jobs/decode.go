package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// EncodePayload validates p and returns its JSON, the bytes that go into the asynq task. A
// zero Version is set to the current one.
func EncodePayload(p Payload) ([]byte, error) {
	switch v := p.(type) {
	case *Generate:
		if v.Version == 0 {
			c := *v
			c.Version = Version
			p = &c
		}
	case *Summarize:
		if v.Version == 0 {
			c := *v
			c.Version = Version
			p = &c
		}
	case nil:
		return nil, invalid("", "payload is nil")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode %s payload: %w", p.TaskType(), err)
	}
	return b, nil
}

// DecodeGenerate strictly decodes and validates a generate payload: unknown fields, wrong
// JSON types, trailing data and invalid UTF-8 are errors naming the field.
func DecodeGenerate(data []byte) (*Generate, error) {
	var g Generate
	if err := decodeStrict(data, &g); err != nil {
		return nil, err
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return &g, nil
}

// DecodeSummarize strictly decodes and validates a summarize payload.
func DecodeSummarize(data []byte) (*Summarize, error) {
	var s Summarize
	if err := decodeStrict(data, &s); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Decode decodes the payload of a task of the given type; the daemon's entry point.
func Decode(taskType string, data []byte) (Payload, error) {
	switch taskType {
	case TypeGenerate:
		return DecodeGenerate(data)
	case TypeSummarize:
		return DecodeSummarize(data)
	}
	return nil, invalid("type", "must be %s or %s, got %q", TypeSummarize, TypeGenerate, clip(taskType))
}

// decodeStrict decodes in two passes: first into generic JSON, which is checked against the
// Go type to give errors with full paths (encoding/json's unknown-field error has no path),
// then into v.
func decodeStrict(data []byte, v any) error {
	if len(data) > MaxPayloadBytes {
		return invalid("", "payload must be at most %d bytes, got %d", MaxPayloadBytes, len(data))
	}
	// encoding/json would quietly turn invalid UTF-8 into U+FFFD.
	if !utf8.Valid(data) {
		off := 0
		for off < len(data) {
			r, n := utf8.DecodeRune(data[off:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			off += n
		}
		return invalid("", "payload must be valid UTF-8: invalid byte at offset %d", off)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return invalid("", "payload is empty; want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return syntaxError(err, len(data))
	}
	if rest := bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return invalid("", "payload must be a single JSON object; data follows it at byte offset %d", len(data)-len(rest))
	}
	if err := checkShape(doc, reflect.TypeOf(v).Elem(), ""); err != nil {
		return err
	}
	// Timeout is omitted when zero, so once decoded an explicit 0 would read as "none given"
	// (the default of an hour): refuse it here, where it is still visible.
	if m, ok := doc.(map[string]any); ok {
		if n, ok := m["timeout"].(json.Number); ok {
			if f, err := n.Float64(); err == nil && f == 0 {
				return invalid("timeout", "must be between 1 and %d seconds, got %s (leave it out for the default)", MaxTimeoutSeconds, n)
			}
		}
	}
	if err := json.Unmarshal(data, v); err != nil {
		// checkShape accepts what Unmarshal accepts; this is a bug if it happens.
		return invalid("", "payload: %v", err)
	}
	return nil
}

func syntaxError(err error, size int) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		// Offset counts the bytes read, the offending one included.
		return invalid("", "payload is not valid JSON at byte offset %d: %v", max(se.Offset-1, 0), err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "payload is not valid JSON: unexpected end at byte offset %d", size)
	}
	return invalid("", "payload is not valid JSON: %v", err)
}

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage(nil))
)

// checkShape walks a generic JSON value alongside the Go type it will be decoded into.
// null is accepted anywhere and means "absent"; Validate decides whether absence is allowed.
func checkShape(v any, t reflect.Type, path string) error {
	if v == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == rawType:
		return nil // any JSON; Validate checks it
	case t == timeType:
		s, ok := v.(string)
		if !ok {
			return invalid(path, "must be an RFC 3339 time string, got %s", kindOf(v))
		}
		if _, err := time.Parse(time.RFC3339, s); err != nil {
			return invalid(path, "must be an RFC 3339 time like 2025-01-02T15:04:05Z, got %q", clip(s))
		}
		return nil
	}
	switch t.Kind() {
	case reflect.String:
		if _, ok := v.(string); !ok {
			return invalid(path, "must be a string, got %s", kindOf(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return invalid(path, "must be a boolean, got %s", kindOf(v))
		}
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, ok := v.(json.Number)
		if !ok {
			return invalid(path, "must be an integer, got %s", kindOf(v))
		}
		if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err != nil {
			return invalid(path, "must be an integer, got %s", clip(string(n)))
		}
	case reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			return invalid(path, "must be a number, got %s", kindOf(v))
		}
		if _, err := strconv.ParseFloat(string(n), 64); err != nil {
			return invalid(path, "must be a finite number, got %s", clip(string(n)))
		}
	case reflect.Slice:
		a, ok := v.([]any)
		if !ok {
			return invalid(path, "must be an array, got %s", kindOf(v))
		}
		for i, e := range a {
			if err := checkShape(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			if path == "" {
				return invalid("", "payload must be a JSON object, got %s", kindOf(v))
			}
			return invalid(path, "must be an object, got %s", kindOf(v))
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys) // report the same field first every time
		for _, k := range keys {
			f, ok := fields[k]
			if !ok {
				return invalid(join(path, clip(k)), "unknown field (known: %s)", strings.Join(sortedNames(fields), ", "))
			}
			if err := checkShape(obj[k], f.Type, join(path, k)); err != nil {
				return err
			}
		}
	default:
		return invalid(path, "has Go type %v that the payload checker does not know", t)
	}
	return nil
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "null"
}

// jsonField is a struct field as encoding/json sees it.
type jsonField struct {
	Name      string
	Type      reflect.Type
	OmitEmpty bool
}

// jsonFields maps JSON names to fields, flattening embedded structs as encoding/json does.
func jsonFields(t reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out[name] = jsonField{Name: name, Type: f.Type, OmitEmpty: strings.Contains(","+opts+",", ",omitempty,")}
	}
	return out
}

func sortedNames(m map[string]jsonField) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}
