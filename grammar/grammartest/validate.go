// Package grammartest holds a small JSON Schema validator for tests of constrained output.
// It is written apart from the grammar (from the specification's wording, on decoded
// values), so that a bug in the grammar's reading of a schema is not repeated here.
package grammartest

import (
	"encoding/json"
	"fmt"
	"math"
	"net/mail"
	"net/netip"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// Validate reports why doc is not valid against schema, or nil. It knows the keywords the
// grammar supports: type, properties, required, additionalProperties, items, minItems,
// maxItems, enum, const, minLength, maxLength, pattern, minimum, maximum,
// exclusiveMinimum, exclusiveMaximum, anyOf, oneOf and $ref to #/$defs.
func Validate(schema, doc []byte) error {
	var s, v any
	if err := json.Unmarshal(schema, &s); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	d := json.NewDecoder(strings.NewReader(string(doc)))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return fmt.Errorf("document %q: %w", doc, err)
	}
	if d.More() {
		return fmt.Errorf("document %q: data after the value", doc)
	}
	return validate(s, s, v, "$")
}

func validate(root, s, v any, at string) error {
	if b, ok := s.(bool); ok {
		if !b {
			return fmt.Errorf("%s: schema false", at)
		}
		return nil
	}
	m := s.(map[string]any)
	if ref, ok := m["$ref"].(string); ok {
		target := root
		if ref != "#" {
			parts := strings.Split(strings.TrimPrefix(ref, "#/"), "/")
			target = root.(map[string]any)[parts[0]].(map[string]any)[parts[1]]
		}
		return validate(root, target, v, at)
	}
	if list, ok := m["anyOf"].([]any); ok {
		for _, x := range list {
			if validate(root, x, v, at) == nil {
				return nil
			}
		}
		return fmt.Errorf("%s: %v matches no anyOf branch", at, v)
	}
	if list, ok := m["oneOf"].([]any); ok {
		n := 0
		for _, x := range list {
			if validate(root, x, v, at) == nil {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%s: %v matches %d oneOf branches", at, v, n)
		}
		return nil
	}
	if c, ok := m["const"]; ok && !equal(c, v) {
		return fmt.Errorf("%s: %v is not the const %v", at, v, c)
	}
	if list, ok := m["enum"].([]any); ok {
		found := false
		for _, x := range list {
			found = found || equal(x, v)
		}
		if !found {
			return fmt.Errorf("%s: %v is not in the enum %v", at, v, list)
		}
	}
	if t, ok := m["type"]; ok {
		types := []any{t}
		if l, isList := t.([]any); isList {
			types = l
		}
		okType := false
		for _, x := range types {
			okType = okType || hasType(x.(string), v)
		}
		if !okType {
			return fmt.Errorf("%s: %v is not of type %v", at, v, t)
		}
	}
	switch v := v.(type) {
	case map[string]any:
		props, _ := m["properties"].(map[string]any)
		for _, r := range asList(m["required"]) {
			if _, ok := v[r.(string)]; !ok {
				return fmt.Errorf("%s: required %q missing", at, r)
			}
		}
		for k, x := range v {
			if ps, ok := props[k]; ok {
				if err := validate(root, ps, x, at+"."+k); err != nil {
					return err
				}
				continue
			}
			switch a := m["additionalProperties"].(type) {
			case bool:
				if !a {
					return fmt.Errorf("%s: property %q not allowed", at, k)
				}
			case map[string]any:
				if err := validate(root, a, x, at+"."+k); err != nil {
					return err
				}
			}
		}
	case []any:
		if n, ok := num(m["minItems"]); ok && float64(len(v)) < n {
			return fmt.Errorf("%s: %d items, fewer than %v", at, len(v), n)
		}
		if n, ok := num(m["maxItems"]); ok && float64(len(v)) > n {
			return fmt.Errorf("%s: %d items, more than %v", at, len(v), n)
		}
		if it, ok := m["items"]; ok {
			for i, x := range v {
				if err := validate(root, it, x, fmt.Sprintf("%s[%d]", at, i)); err != nil {
					return err
				}
			}
		}
	case string:
		n := float64(utf8.RuneCountInString(v))
		if l, ok := num(m["minLength"]); ok && n < l {
			return fmt.Errorf("%s: %q shorter than %v", at, v, l)
		}
		if l, ok := num(m["maxLength"]); ok && n > l {
			return fmt.Errorf("%s: %q longer than %v", at, v, l)
		}
		if p, ok := m["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(v) {
			return fmt.Errorf("%s: %q does not match %s", at, v, p)
		}
		if f, ok := m["format"].(string); ok {
			if err := checkFormat(f, v); err != nil {
				return fmt.Errorf("%s: %q is not a %s: %v", at, v, f, err)
			}
		}
	case json.Number:
		f, _ := v.Float64()
		if l, ok := num(m["minimum"]); ok && f < l {
			return fmt.Errorf("%s: %v below minimum %v", at, v, l)
		}
		if l, ok := num(m["maximum"]); ok && f > l {
			return fmt.Errorf("%s: %v above maximum %v", at, v, l)
		}
		if l, ok := num(m["exclusiveMinimum"]); ok && f <= l {
			return fmt.Errorf("%s: %v not above %v", at, v, l)
		}
		if l, ok := num(m["exclusiveMaximum"]); ok && f >= l {
			return fmt.Errorf("%s: %v not below %v", at, v, l)
		}
	}
	return nil
}

// checkFormat parses v with the standard library where it can.
func checkFormat(f, v string) error {
	var err error
	switch f {
	case "date":
		_, err = time.Parse(time.DateOnly, v)
	case "date-time":
		_, err = time.Parse(time.RFC3339Nano, v)
	case "time":
		_, err = time.Parse("15:04:05.999999999Z07:00", v)
	case "uuid":
		if !regexp.MustCompile(`^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$`).MatchString(v) {
			err = fmt.Errorf("not 8-4-4-4-12 hex digits")
		}
	case "email":
		_, err = mail.ParseAddress(v)
	case "ipv4":
		var a netip.Addr
		if a, err = netip.ParseAddr(v); err == nil && !a.Is4() {
			err = fmt.Errorf("not IPv4")
		}
	default:
		err = fmt.Errorf("unknown format")
	}
	return err
}

func asList(x any) []any { l, _ := x.([]any); return l }

func num(x any) (float64, bool) {
	f, ok := x.(float64)
	return f, ok
}

func hasType(t string, v any) bool {
	switch v := v.(type) {
	case map[string]any:
		return t == "object"
	case []any:
		return t == "array"
	case string:
		return t == "string"
	case bool:
		return t == "boolean"
	case nil:
		return t == "null"
	case json.Number:
		if t == "number" {
			return true
		}
		f, err := v.Float64()
		return t == "integer" && err == nil && f == math.Trunc(f)
	}
	return false
}

func equal(a, b any) bool {
	if n, ok := b.(json.Number); ok {
		f, _ := n.Float64()
		b = f
	}
	return reflect.DeepEqual(normalize(a), normalize(b))
}

func normalize(x any) any {
	switch x := x.(type) {
	case json.Number:
		f, _ := x.Float64()
		return f
	case map[string]any:
		out := map[string]any{}
		for k, v := range x {
			out[k] = normalize(v)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, v := range x {
			out[i] = normalize(v)
		}
		return out
	}
	return x
}

// Schemas cover the keywords the grammar supports, with bounds on most strings and arrays
// so that a random-weight model's output ends well within a test's token budget.
var Schemas = map[string]string{
	"person": `{"type":"object","properties":{
		"name":{"type":"string","minLength":1,"maxLength":12},
		"age":{"type":"integer","minimum":0,"maximum":130},
		"email":{"type":"string","pattern":"^[a-z]{1,8}@[a-z]{1,8}\\.(com|org)$"},
		"tags":{"type":"array","items":{"enum":["a","b\"c","ü"]},"minItems":1,"maxItems":3},
		"score":{"type":"number","minimum":-2,"maximum":3},
		"active":{"type":"boolean"},
		"born":{"type":"string","format":"date"},
		"seen":{"type":"string","format":"date-time"},
		"id":{"type":"string","format":"uuid"}},
		"required":["name","age","tags"],"additionalProperties":false}`,
	"nested": `{"$defs":{"point":{"type":"object","properties":{"x":{"type":"integer","exclusiveMinimum":-10,"exclusiveMaximum":10},"y":{"type":"integer"}},"required":["x","y"],"additionalProperties":false}},
		"type":"object","properties":{
		"kind":{"const":"shape"},
		"points":{"type":"array","items":{"$ref":"#/$defs/point"},"maxItems":4},
		"label":{"anyOf":[{"type":"null"},{"type":"string","maxLength":5}]},
		"meta":{"type":"object","additionalProperties":{"type":"boolean"}}},
		"required":["kind","points"]}`,
	"tree": `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":1,"maximum":9},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"],"additionalProperties":false}},
		"$ref":"#/$defs/node"}`,
	"choice":  `{"oneOf":[{"type":"string","enum":["x","y"]},{"type":"integer","minimum":100,"maximum":105},{"type":"array","items":{"type":"boolean"},"minItems":2,"maxItems":2}]}`,
	"formats": `{"type":"object","properties":{"e":{"type":"string","format":"email"},"t":{"type":"string","format":"time"},"ip":{"type":"string","format":"ipv4"}},"required":["e","t","ip"],"additionalProperties":false}`,
	"code":    `{"type":"string","pattern":"^[A-Z]{3}-[0-9]{2}\"[\\\\x]$"}`,
}
