package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// JSON Schema. A schema becomes a grammar of compact JSON (no whitespace) whose every
// sentence validates against it. Keywords that constrain values are either enforced or
// refused with an error naming them; none is ignored. Annotations (title, description, …)
// do not constrain anything and are accepted. Our own JSON reader keeps the order of
// properties, which the output follows. No JSON Schema library is used: the keywords we
// support are a small set and each needs its own grammar anyway.

// Limits of generated JSON that keep a random or looping model from writing forever where
// the schema sets no bound, and keep numbers within what a float64 holds exactly.
const (
	maxIntDigits  = 16 // digits of an integer, or of a number's integer part
	maxFracDigits = 16 // digits after the point
	maxExpDigits  = 2
)

// annotations are keywords that describe and do not constrain.
var annotations = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "title": true, "description": true,
	"examples": true, "default": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$defs": true, "definitions": true, "$anchor": true,
}

// FromJSONSchema returns the grammar of the compact JSON texts valid against schema.
func FromJSONSchema(schema []byte) (*Grammar, error) {
	root, err := readJSON(schema)
	if err != nil {
		return nil, fmt.Errorf("%w: JSON Schema: %v", ErrGrammar, err)
	}
	b := newSchemaBuilder(root)
	e, err := b.schema(root, "#", 0)
	if err != nil {
		return nil, err
	}
	b.rules["root"] = e
	return &Grammar{Rules: b.rules, Root: "root"}, nil
}

// JSONObject is the grammar of any JSON object: OpenAI's response_format json_object.
func JSONObject() *Grammar {
	b := newSchemaBuilder(nil)
	b.rules["root"] = b.anyObject()
	return &Grammar{Rules: b.rules, Root: "root"}
}

type schemaBuilder struct {
	root  any
	rules map[string]Expr
	refs  map[string]string // JSON pointer → rule name
	n     int
}

func newSchemaBuilder(root any) *schemaBuilder {
	b := &schemaBuilder{root: root, rules: map[string]Expr{}, refs: map[string]string{}}
	char := Alt{
		Class{Ranges: []Range{{'"', '"'}, {'\\', '\\'}, {0, 0x1f}}, Neg: true},
		Seq{Lit(`\`), Alt{Class{Ranges: []Range{{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}}},
			Seq{Lit("u"), Rep{X: hexDigit, Min: 4, Max: 4}}}},
	}
	b.rules["json-char"] = char
	b.rules["json-string"] = Seq{Lit(`"`), Rep{X: Ref("json-char"), Min: 0, Max: -1}, Lit(`"`)}
	b.rules["json-integer"] = Seq{Rep{X: Lit("-"), Min: 0, Max: 1}, natural(maxIntDigits)}
	b.rules["json-number"] = Seq{Ref("json-integer"), fraction(), exponent()}
	b.rules["json-value"] = Alt{Ref("json-object"), Ref("json-array"), Ref("json-string"), Ref("json-number"), Lit("true"), Lit("false"), Lit("null")}
	b.rules["json-object"] = Seq{Lit("{"), Rep{X: Seq{Ref("json-string"), Lit(":"), Ref("json-value"), Rep{X: Seq{Lit(","), Ref("json-string"), Lit(":"), Ref("json-value")}, Min: 0, Max: -1}}, Min: 0, Max: 1}, Lit("}")}
	b.rules["json-array"] = Seq{Lit("["), Rep{X: Seq{Ref("json-value"), Rep{X: Seq{Lit(","), Ref("json-value")}, Min: 0, Max: -1}}, Min: 0, Max: 1}, Lit("]")}
	return b
}

var (
	digit    = Class{Ranges: []Range{{'0', '9'}}}
	digit19  = Class{Ranges: []Range{{'1', '9'}}}
	hexDigit = Class{Ranges: []Range{{'0', '9'}, {'a', 'f'}, {'A', 'F'}}}
)

// natural is 0 or a number of up to n digits without a leading zero.
func natural(n int) Expr {
	return Alt{Lit("0"), Seq{digit19, Rep{X: digit, Min: 0, Max: n - 1}}}
}

func fraction() Expr {
	return Rep{X: Seq{Lit("."), Rep{X: digit, Min: 1, Max: maxFracDigits}}, Min: 0, Max: 1}
}

func exponent() Expr {
	return Rep{X: Seq{Class{Ranges: []Range{{'e', 'e'}, {'E', 'E'}}}, Rep{X: Class{Ranges: []Range{{'+', '+'}, {'-', '-'}}}, Min: 0, Max: 1}, Rep{X: digit, Min: 1, Max: maxExpDigits}}, Min: 0, Max: 1}
}

func (b *schemaBuilder) anyObject() Expr { return Ref("json-object") }

// object is a JSON object as read, its keys in order.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) (any, bool) { v, ok := o.vals[k]; return v, ok }

// readJSON decodes one JSON value with objects as *object (ordered) and numbers as
// json.Number.
func readJSON(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := readValue(d, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err == nil {
		return nil, fmt.Errorf("data after the top-level value")
	}
	return v, nil
}

func readValue(d *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		o := &object{vals: map[string]any{}}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return nil, err
			}
			key := k.(string)
			v, err := readValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			if _, dup := o.vals[key]; dup {
				return nil, fmt.Errorf("key %q appears twice in an object", key)
			}
			o.keys = append(o.keys, key)
			o.vals[key] = v
		}
		_, err := d.Token()
		return o, err
	case json.Delim('['):
		var a []any
		for d.More() {
			v, err := readValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.Token()
		return a, err
	}
	return t, nil
}

// writeJSON writes v compactly, object keys in order: the literal text of an enum or const.
func writeJSON(sb *strings.Builder, v any) {
	switch v := v.(type) {
	case *object:
		sb.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			writeJSON(sb, k)
			sb.WriteByte(':')
			writeJSON(sb, v.vals[k])
		}
		sb.WriteByte('}')
	case []any:
		sb.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				sb.WriteByte(',')
			}
			writeJSON(sb, x)
		}
		sb.WriteByte(']')
	case nil:
		sb.WriteString("null")
	default: // string, bool, json.Number; "<" stays "<", not "\u003c"
		var buf bytes.Buffer
		e := json.NewEncoder(&buf)
		e.SetEscapeHTML(false)
		_ = e.Encode(v)
		sb.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	}
}

func (b *schemaBuilder) errorf(path, format string, args ...any) error {
	return fmt.Errorf("%w: JSON Schema at %s: %s", ErrGrammar, path, fmt.Sprintf(format, args...))
}

// schema returns the expression of the values valid against s (at JSON pointer path).
func (b *schemaBuilder) schema(s any, path string, depth int) (Expr, error) {
	if depth > maxDepth {
		return nil, b.errorf(path, "nested deeper than %d", maxDepth)
	}
	switch s := s.(type) {
	case bool:
		if s {
			return Ref("json-value"), nil
		}
		return nil, b.errorf(path, "the schema false admits no value")
	case *object:
		return b.object(s, path, depth)
	}
	return nil, b.errorf(path, "a schema must be an object or a boolean")
}

func (b *schemaBuilder) object(s *object, path string, depth int) (Expr, error) {
	// Refuse what we do not enforce before anything else, naming it.
	for _, k := range s.keys {
		if !annotations[k] && !supported[k] {
			return nil, b.errorf(path, "keyword %q is not supported", k)
		}
	}
	if ref, ok := s.get("$ref"); ok {
		if len(s.keys) > 1 && slices.ContainsFunc(s.keys, func(k string) bool { return k != "$ref" && !annotations[k] }) {
			return nil, b.errorf(path, "$ref beside other constraining keywords is not supported")
		}
		r, ok := ref.(string)
		if !ok {
			return nil, b.errorf(path, "$ref must be a string")
		}
		return b.ref(r, path, depth)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		v, ok := s.get(k)
		if !ok {
			continue
		}
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return nil, b.errorf(path, "%s must be a non-empty array of schemas", k)
		}
		if slices.ContainsFunc(s.keys, func(k string) bool { return !annotations[k] && k != "anyOf" && k != "oneOf" }) {
			return nil, b.errorf(path, "%s beside other constraining keywords is not supported", k)
		}
		if _, both := s.get("oneOf"); both && k == "anyOf" {
			return nil, b.errorf(path, "anyOf together with oneOf is not supported")
		}
		var alt Alt
		for i, x := range list {
			e, err := b.schema(x, fmt.Sprintf("%s/%s/%d", path, k, i), depth+1)
			if err != nil {
				return nil, err
			}
			alt = append(alt, e)
		}
		return alt, nil
	}
	if v, ok := s.get("const"); ok {
		if slices.ContainsFunc(s.keys, func(k string) bool { return !annotations[k] && k != "const" && k != "type" }) {
			return nil, b.errorf(path, "const beside other constraining keywords is not supported")
		}
		var sb strings.Builder
		writeJSON(&sb, v)
		return Lit(sb.String()), nil
	}
	if v, ok := s.get("enum"); ok {
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return nil, b.errorf(path, "enum must be a non-empty array")
		}
		if slices.ContainsFunc(s.keys, func(k string) bool { return !annotations[k] && k != "enum" && k != "type" }) {
			return nil, b.errorf(path, "enum beside other constraining keywords is not supported")
		}
		var alt Alt
		for _, x := range list {
			var sb strings.Builder
			writeJSON(&sb, x)
			alt = append(alt, Lit(sb.String()))
		}
		return alt, nil
	}
	var types []string
	switch t := s.vals["type"].(type) {
	case nil:
		if _, has := s.get("type"); has {
			return nil, b.errorf(path, "type must be a string or an array of strings")
		}
		types = b.impliedTypes(s)
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			name, ok := x.(string)
			if !ok {
				return nil, b.errorf(path, "type must be a string or an array of strings")
			}
			types = append(types, name)
		}
	default:
		return nil, b.errorf(path, "type must be a string or an array of strings")
	}
	if len(types) == 0 {
		return nil, b.errorf(path, "type is an empty array")
	}
	for _, k := range s.keys {
		applies := !slices.Contains(typeKeywords["object"], k) && !slices.Contains(typeKeywords["array"], k) &&
			!slices.Contains(typeKeywords["string"], k) && !slices.Contains(typeKeywords["number"], k)
		for _, t := range types {
			applies = applies || slices.Contains(typeKeywords[t], k)
		}
		if !applies {
			return nil, b.errorf(path, "keyword %q does not apply to type %s", k, strings.Join(types, ", "))
		}
	}
	var alt Alt
	for _, t := range types {
		e, err := b.typed(t, s, path, depth)
		if err != nil {
			return nil, err
		}
		alt = append(alt, e)
	}
	if len(alt) == 1 {
		return alt[0], nil
	}
	return alt, nil
}

// supported are the keywords that constrain and that we enforce.
var supported = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "minItems": true, "maxItems": true, "enum": true, "const": true,
	"minLength": true, "maxLength": true, "pattern": true, "minimum": true, "maximum": true,
	"exclusiveMinimum": true, "exclusiveMaximum": true, "anyOf": true, "oneOf": true, "$ref": true,
	"format": true,
}

// formats are the string formats enforced, as patterns of what RFC 3339 (date, time,
// date-time), RFC 4122 (uuid), RFC 5321's common subset (email: dot-atoms only) and dotted
// quads (ipv4) allow. Days stop at 28, which every month has, so that every date the
// grammar writes exists without a calendar in the grammar; years are 0000–9999.
var formats = map[string]string{
	"date":      `[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])`,
	"time":      `([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])`,
	"date-time": `[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])`,
	"uuid":      `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`,
	"email":     `[a-zA-Z0-9_+-]{1,32}(\.[a-zA-Z0-9_+-]{1,32}){0,3}@[a-zA-Z0-9-]{1,32}(\.[a-zA-Z0-9-]{1,32}){0,3}\.[a-zA-Z]{2,8}`,
	"ipv4":      `(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}`,
}

// typeKeywords are the keywords that apply to each type; one that applies to none of the
// schema's types is refused (it would constrain nothing, a sign of a mistaken schema).
var typeKeywords = map[string][]string{
	"object":  {"properties", "required", "additionalProperties"},
	"array":   {"items", "minItems", "maxItems"},
	"string":  {"minLength", "maxLength", "pattern", "format"},
	"integer": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
	"number":  {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
	"boolean": nil,
	"null":    nil,
}

// impliedTypes are the types a schema without "type" stands for: those its keywords apply
// to, or every type when it has none ({} is any value).
func (b *schemaBuilder) impliedTypes(s *object) []string {
	var out []string
	for _, t := range []string{"object", "array", "string", "number"} {
		for _, k := range typeKeywords[t] {
			if _, ok := s.get(k); ok {
				out = append(out, t)
				break
			}
		}
	}
	if len(out) == 0 {
		return []string{"any"}
	}
	return out
}

func (b *schemaBuilder) typed(t string, s *object, path string, depth int) (Expr, error) {
	switch t {
	case "any":
		return Ref("json-value"), nil
	case "object":
		return b.objectType(s, path, depth)
	case "array":
		return b.arrayType(s, path, depth)
	case "string":
		return b.stringType(s, path)
	case "integer", "number":
		return b.numberType(t, s, path)
	case "boolean":
		return Alt{Lit("true"), Lit("false")}, nil
	case "null":
		return Lit("null"), nil
	}
	return nil, b.errorf(path, "type %q is not a JSON Schema type", t)
}

func (b *schemaBuilder) ref(r, path string, depth int) (Expr, error) {
	if name, ok := b.refs[r]; ok {
		return Ref(name), nil
	}
	var target any
	switch {
	case r == "#":
		target = b.root
	case strings.HasPrefix(r, "#/$defs/") || strings.HasPrefix(r, "#/definitions/"):
		parts := strings.SplitN(r[2:], "/", 2)
		defs, _ := b.rootObject().get(parts[0])
		d, ok := defs.(*object)
		if !ok {
			return nil, b.errorf(path, "$ref %q: the schema has no %s", r, parts[0])
		}
		name := strings.ReplaceAll(strings.ReplaceAll(parts[1], "~1", "/"), "~0", "~")
		if target, ok = d.get(name); !ok {
			return nil, b.errorf(path, "$ref %q: no definition %q", r, name)
		}
	default:
		return nil, b.errorf(path, "$ref %q: only #, #/$defs/NAME and #/definitions/NAME are supported", r)
	}
	b.n++
	name := fmt.Sprintf("ref-%d", b.n)
	b.refs[r] = name // before building, so that recursive references find it
	e, err := b.schema(target, r, depth+1)
	if err != nil {
		return nil, err
	}
	b.rules[name] = e
	return Ref(name), nil
}

func (b *schemaBuilder) rootObject() *object {
	o, _ := b.root.(*object)
	if o == nil {
		return &object{vals: map[string]any{}}
	}
	return o
}

func (b *schemaBuilder) objectType(s *object, path string, depth int) (Expr, error) {
	props, _ := s.get("properties")
	pm, isObj := props.(*object)
	if props != nil && !isObj {
		return nil, b.errorf(path, "properties must be an object")
	}
	required := map[string]bool{}
	if r, ok := s.get("required"); ok {
		list, ok := r.([]any)
		if !ok {
			return nil, b.errorf(path, "required must be an array of strings")
		}
		for _, x := range list {
			name, ok := x.(string)
			if !ok {
				return nil, b.errorf(path, "required must be an array of strings")
			}
			if pm == nil || pm.vals[name] == nil {
				return nil, b.errorf(path, "required names %q, which properties does not define", name)
			}
			required[name] = true
		}
	}
	addl, hasAddl := s.get("additionalProperties")
	if pm == nil || len(pm.keys) == 0 {
		switch a := addl.(type) {
		case nil, bool:
			if a == false && hasAddl {
				return Lit("{}"), nil
			}
			return b.anyObject(), nil
		case *object: // a map: any keys, values of one schema
			v, err := b.schema(a, path+"/additionalProperties", depth+1)
			if err != nil {
				return nil, err
			}
			pair := Seq{Ref("json-string"), Lit(":"), v}
			return Seq{Lit("{"), Rep{X: Seq{pair, Rep{X: Seq{Lit(","), pair}, Min: 0, Max: -1}}, Min: 0, Max: 1}, Lit("}")}, nil
		}
		return nil, b.errorf(path, "additionalProperties must be a boolean or a schema")
	}
	if _, isSchema := addl.(*object); isSchema {
		return nil, b.errorf(path, "additionalProperties as a schema beside properties is not supported (use false)")
	}
	// The declared properties in order, the required ones always, the others optional;
	// no others are written (a subset of what additionalProperties true allows).
	var kv []Expr
	for _, k := range pm.keys {
		v, err := b.schema(pm.vals[k], path+"/properties/"+k, depth+1)
		if err != nil {
			return nil, err
		}
		var sb strings.Builder
		writeJSON(&sb, k)
		kv = append(kv, Seq{Lit(sb.String() + ":"), v})
	}
	// first(i): the properties from i on, none written yet; after(i): at least one was.
	b.n++
	id := b.n
	first := func(i int) string { return fmt.Sprintf("obj-%d-first-%d", id, i) }
	after := func(i int) string { return fmt.Sprintf("obj-%d-after-%d", id, i) }
	n := len(pm.keys)
	b.rules[first(n)], b.rules[after(n)] = Seq{}, Seq{}
	for i := n - 1; i >= 0; i-- {
		if required[pm.keys[i]] {
			b.rules[first(i)] = Seq{kv[i], Ref(after(i + 1))}
			b.rules[after(i)] = Seq{Lit(","), kv[i], Ref(after(i + 1))}
		} else {
			b.rules[first(i)] = Alt{Seq{kv[i], Ref(after(i + 1))}, Ref(first(i + 1))}
			b.rules[after(i)] = Alt{Seq{Lit(","), kv[i], Ref(after(i + 1))}, Ref(after(i + 1))}
		}
	}
	return Seq{Lit("{"), Ref(first(0)), Lit("}")}, nil
}

func (b *schemaBuilder) count(s *object, key, path string) (int, bool, error) {
	v, ok := s.get(key)
	if !ok {
		return 0, false, nil
	}
	n, isNum := v.(json.Number)
	i, err := strconv.Atoi(string(n))
	if !isNum || err != nil || i < 0 {
		return 0, false, b.errorf(path, "%s must be a non-negative integer", key)
	}
	if i > MaxRepeat {
		return 0, false, b.errorf(path, "%s = %d is above the supported %d", key, i, MaxRepeat)
	}
	return i, true, nil
}

func (b *schemaBuilder) bounds(s *object, minKey, maxKey, path string) (lo, hi int, err error) {
	lo, _, err = b.count(s, minKey, path)
	if err != nil {
		return 0, 0, err
	}
	hi, ok, err := b.count(s, maxKey, path)
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		hi = -1
	} else if hi < lo {
		return 0, 0, b.errorf(path, "%s %d is below %s %d", maxKey, hi, minKey, lo)
	}
	return lo, hi, nil
}

func (b *schemaBuilder) arrayType(s *object, path string, depth int) (Expr, error) {
	item := Expr(Ref("json-value"))
	if it, ok := s.get("items"); ok {
		if _, isList := it.([]any); isList {
			return nil, b.errorf(path, "items as an array (tuple validation) is not supported")
		}
		var err error
		if item, err = b.schema(it, path+"/items", depth+1); err != nil {
			return nil, err
		}
	}
	lo, hi, err := b.bounds(s, "minItems", "maxItems", path)
	if err != nil {
		return nil, err
	}
	b.n++
	name := fmt.Sprintf("item-%d", b.n)
	b.rules[name] = item
	rest := Seq{Lit(","), Ref(name)}
	switch {
	case hi == 0:
		return Lit("[]"), nil
	case lo == 0:
		more := -1
		if hi > 0 {
			more = hi - 1
		}
		return Seq{Lit("["), Rep{X: Seq{Ref(name), Rep{X: rest, Min: 0, Max: more}}, Min: 0, Max: 1}, Lit("]")}, nil
	}
	more := -1
	if hi > 0 {
		more = hi - 1
	}
	return Seq{Lit("["), Ref(name), Rep{X: rest, Min: lo - 1, Max: more}, Lit("]")}, nil
}

// jsonEscape spells a character inside a JSON string.
func jsonEscape(r rune) string {
	switch {
	case r == '"':
		return `\"`
	case r == '\\':
		return `\\`
	case r == '\n':
		return `\n`
	case r == '\r':
		return `\r`
	case r == '\t':
		return `\t`
	case r < 0x20:
		return fmt.Sprintf(`\u%04x`, r)
	}
	return ""
}

func (b *schemaBuilder) stringType(s *object, path string) (Expr, error) {
	lo, hi, err := b.bounds(s, "minLength", "maxLength", path)
	if err != nil {
		return nil, err
	}
	p, hasPattern := s.get("pattern")
	if f, ok := s.get("format"); ok {
		name, _ := f.(string)
		re, known := formats[name]
		if !known {
			return nil, b.errorf(path, "format %q is not supported (supported: date, date-time, email, ipv4, time, uuid)", f)
		}
		if hasPattern {
			return nil, b.errorf(path, "format together with pattern is not supported")
		}
		p, hasPattern = re, true
	}
	if hasPattern {
		if _, has := s.get("minLength"); has {
			return nil, b.errorf(path, "pattern or format together with minLength is not supported")
		}
		if _, has := s.get("maxLength"); has {
			return nil, b.errorf(path, "pattern or format together with maxLength is not supported")
		}
		ps, ok := p.(string)
		if !ok {
			return nil, b.errorf(path, "pattern must be a string")
		}
		e, err := regexExpr(ps, jsonEscape)
		if err != nil {
			return nil, fmt.Errorf("JSON Schema at %s: pattern: %w", path, err)
		}
		return Seq{Lit(`"`), e, Lit(`"`)}, nil
	}
	if lo == 0 && hi < 0 {
		return Ref("json-string"), nil
	}
	return Seq{Lit(`"`), Rep{X: Ref("json-char"), Min: lo, Max: hi}, Lit(`"`)}, nil
}

func (b *schemaBuilder) numberType(t string, s *object, path string) (Expr, error) {
	limit := math.Pow10(maxIntDigits) - 1
	lo, hi := -limit, limit
	bounded := false
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		v, ok := s.get(k)
		if !ok {
			continue
		}
		n, isNum := v.(json.Number)
		f, err := n.Float64()
		if !isNum || err != nil || math.Abs(f) > limit {
			return nil, b.errorf(path, "%s must be a number within ±%g", k, limit)
		}
		if t == "number" && f != math.Trunc(f) {
			return nil, b.errorf(path, "%s = %v on a number: only whole-number bounds are supported", k, f)
		}
		bounded = true
		switch k {
		case "minimum":
			lo = max(lo, math.Ceil(f))
		case "maximum":
			hi = min(hi, math.Floor(f))
		case "exclusiveMinimum":
			if t == "number" {
				return nil, b.errorf(path, "exclusiveMinimum on a number is not supported (use integer, or minimum)")
			}
			lo = max(lo, math.Floor(f)+1)
		case "exclusiveMaximum":
			if t == "number" {
				return nil, b.errorf(path, "exclusiveMaximum on a number is not supported (use integer, or maximum)")
			}
			hi = min(hi, math.Ceil(f)-1)
		}
	}
	if lo > hi {
		return nil, b.errorf(path, "no %s lies within the bounds", t)
	}
	if t == "integer" {
		if !bounded {
			return Ref("json-integer"), nil
		}
		return intRange(int64(lo), int64(hi)), nil
	}
	if !bounded {
		return Ref("json-number"), nil
	}
	// A number in [lo, hi] with whole bounds: an integer part in [lo, hi-1] and any
	// fraction (for a negative part, one in [lo+1, hi] with any fraction and "-0." for the
	// span (-1, 0)), or exactly an end with a zero fraction.
	zeros := Rep{X: Seq{Lit("."), Rep{X: Lit("0"), Min: 1, Max: maxFracDigits}}, Min: 0, Max: 1}
	frac := Rep{X: Seq{Lit("."), Rep{X: digit, Min: 1, Max: maxFracDigits}}, Min: 0, Max: 1}
	var alt Alt
	l, h := int64(lo), int64(hi)
	alt = append(alt, Seq{intRange(l, h), zeros})
	if pl, ph := max(l, 0), h-1; pl <= ph { // non-negative parts: x.f ≤ ph.999… < h
		alt = append(alt, Seq{intRange(pl, ph), frac})
	}
	if nl, nh := l+1, min(h, 0); nl <= nh { // negative: -x.f with -x in [l+1, 0]
		if nh == 0 {
			alt = append(alt, Seq{Lit("-0"), frac})
			nh = -1
		}
		if nl <= nh {
			alt = append(alt, Seq{intRange(nl, nh), frac})
		}
	}
	return alt, nil
}

// intRange is the decimal integers in [lo, hi] without leading zeros.
func intRange(lo, hi int64) Expr {
	var alt Alt
	if lo < 0 {
		nh := min(hi, -1)
		alt = append(alt, Seq{Lit("-"), natRange(uint64(-nh), uint64(-lo))})
		lo = 0
	}
	if lo <= hi {
		alt = append(alt, natRange(uint64(lo), uint64(hi)))
	}
	if len(alt) == 1 {
		return alt[0]
	}
	return alt
}

// natRange is the naturals in [lo, hi]: per number of digits, a range of equal-length
// strings.
func natRange(lo, hi uint64) Expr {
	var alt Alt
	a := strconv.FormatUint(lo, 10)
	z := strconv.FormatUint(hi, 10)
	for n := len(a); n <= len(z); n++ {
		var from, to string
		if n == len(a) {
			from = a
		} else {
			from = "1" + strings.Repeat("0", n-1)
		}
		if n == len(z) {
			to = z
		} else {
			to = strings.Repeat("9", n)
		}
		alt = append(alt, sameLength(from, to))
	}
	if len(alt) == 1 {
		return alt[0]
	}
	return alt
}

// sameLength is the digit strings s with from ≤ s ≤ to, all three of one length.
func sameLength(from, to string) Expr {
	if from == to {
		return Lit(from)
	}
	if len(from) == 1 {
		return Class{Ranges: []Range{{rune(from[0]), rune(to[0])}}}
	}
	if strings.Trim(from, "0") == "" && strings.Trim(to, "9") == "" {
		// Every string of the length. Without this, 0…0 to 9…9 recurses into two such
		// ranges one shorter: 2^n alternatives (65,536 and a 3 MB grammar for 16 digits).
		return Rep{X: digit, Min: len(from), Max: len(from)}
	}
	if from[0] == to[0] {
		return Seq{Lit(from[:1]), sameLength(from[1:], to[1:])}
	}
	n := len(from) - 1
	var alt Alt
	alt = append(alt, Seq{Lit(from[:1]), sameLength(from[1:], strings.Repeat("9", n))})
	if from[0]+1 <= to[0]-1 {
		alt = append(alt, Seq{Class{Ranges: []Range{{rune(from[0] + 1), rune(to[0] - 1)}}}, Rep{X: digit, Min: n, Max: n}})
	}
	alt = append(alt, Seq{Lit(to[:1]), sameLength(strings.Repeat("0", n), to[1:])})
	return alt
}
