package jinja

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Value is what templates compute with, with Python's meaning:
//
//	nil        None
//	bool       bool
//	int64      int
//	float64    float
//	string     str
//	[]Value    list
//	Tuple      tuple
//	*Dict      dict, keys in insertion order
//	Undefined  a name or attribute that does not exist
//
// plus the engine's own namespaces, macros, loop objects and functions.
type Value = any

// Tuple is a Python tuple: a list that prints with parentheses (dict.items() yields them).
type Tuple []Value

// Undefined is what a missing variable, attribute or key evaluates to: it prints as nothing,
// is false, iterates as empty, and raises when used in arithmetic or called (jinja2's default
// Undefined).
type Undefined struct{ Name string }

// Dict is an ordered mapping from string keys.
type Dict struct {
	keys []string
	m    map[string]Value
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{m: map[string]Value{}} }

// Set adds or replaces key.
func (d *Dict) Set(key string, v Value) {
	if _, ok := d.m[key]; !ok {
		d.keys = append(d.keys, key)
	}
	d.m[key] = v
}

// Get returns the value at key.
func (d *Dict) Get(key string) (Value, bool) {
	v, ok := d.m[key]
	return v, ok
}

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []string { return d.keys }

// Len is the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

// namespace is what namespace() returns: the one object templates may assign attributes to.
type namespace struct{ attrs *Dict }

// function is a callable: a global, a bound method, a macro, a loop's cycle.
type function struct {
	name string
	call func(e *evaluator, pos []Value, kw *Dict) (Value, error)
}

// Error is a template failing: a syntax error at compile time, or a TypeError,
// UndefinedError, TemplateError (raise_exception) and the like while rendering, named as
// jinja2 names them.
type Error struct {
	Kind string
	Msg  string
	Line int // 0 when unknown
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s: %s (line %d)", e.Kind, e.Msg, e.Line)
	}
	return e.Kind + ": " + e.Msg
}

// ErrLimit is wrapped by the error a render returns when it goes past one of its Limits.
var ErrLimit = errors.New("jinja: limit exceeded")

func typeErr(format string, a ...any) error {
	return &Error{Kind: "TypeError", Msg: fmt.Sprintf(format, a...)}
}

func undefErr(u Undefined) error {
	if u.Name == "" {
		return &Error{Kind: "UndefinedError", Msg: "value is undefined"}
	}
	return &Error{Kind: "UndefinedError", Msg: fmt.Sprintf("'%s' is undefined", u.Name)}
}

// typeName is Python's name of a value's type, for error messages.
func typeName(v Value) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []Value:
		return "list"
	case Tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case Undefined:
		return "Undefined"
	case *namespace:
		return "Namespace"
	case *function:
		return "function"
	case *loop:
		return "LoopContext"
	}
	return fmt.Sprintf("%T", v)
}

func truthy(v Value) bool {
	switch v := v.(type) {
	case nil, Undefined:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case []Value:
		return len(v) > 0
	case Tuple:
		return len(v) > 0
	case *Dict:
		return v.Len() > 0
	}
	return true
}

// str is Python's str(v), which {{ v }} prints (None prints "None"; undefined nothing).
func str(v Value) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case Undefined:
		return ""
	case string:
		return v
	case bool:
		if v {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return pyFloat(v)
	}
	return repr(v)
}

// repr is Python's repr(v), used inside printed lists and dicts.
func repr(v Value) string {
	switch v := v.(type) {
	case string:
		return pyRepr(v)
	case []Value:
		var b strings.Builder
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(repr(x))
		}
		b.WriteByte(']')
		return b.String()
	case Tuple:
		if len(v) == 1 {
			return "(" + repr(v[0]) + ",)"
		}
		s := repr([]Value(v))
		return "(" + s[1:len(s)-1] + ")"
	case *Dict:
		var b strings.Builder
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(pyRepr(k) + ": " + repr(v.m[k]))
		}
		b.WriteByte('}')
		return b.String()
	case *namespace:
		return "<Namespace " + repr(v.attrs) + ">"
	case *function:
		return "<function " + v.name + ">"
	case *loop:
		return "<LoopContext>"
	case Undefined:
		return "Undefined"
	}
	return str(v)
}

// pyRepr quotes s as Python's repr does: single quotes unless s has one and no double quote.
func pyRepr(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteByte(q)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// pyFloat formats f as Python's repr does: the shortest digits that round-trip, in fixed
// notation with ".0" for whole numbers when the exponent is in [-4, 16), else as 1e+16.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// equal is Python's ==.
func equal(a, b Value) bool {
	if x, ok := a.(Tuple); ok {
		y, ok := b.(Tuple)
		return ok && equal([]Value(x), []Value(y))
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case bool:
		switch y := b.(type) {
		case bool:
			return x == y
		case int64, float64:
			return equal(boolInt(x), y)
		}
	case int64:
		switch y := b.(type) {
		case int64:
			return x == y
		case float64:
			return float64(x) == y
		case bool:
			return x == boolInt(y)
		}
	case float64:
		switch y := b.(type) {
		case int64:
			return x == float64(y)
		case float64:
			return x == y
		case bool:
			return x == float64(boolInt(y))
		}
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []Value:
		y, ok := b.([]Value)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for _, k := range x.keys {
			w, ok := y.m[k]
			if !ok || !equal(x.m[k], w) {
				return false
			}
		}
		return true
	}
	return a == b
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// compare orders numbers with numbers, strings with strings and lists element-wise, as
// Python's < does; anything else is a TypeError.
func compare(op string, a, b Value) (int, error) {
	if x, ok := a.(Tuple); ok {
		if y, ok := b.(Tuple); ok {
			a, b = []Value(x), []Value(y)
		}
	}
	if x, ok := a.(bool); ok {
		a = boolInt(x)
	}
	if y, ok := b.(bool); ok {
		b = boolInt(y)
	}
	switch x := a.(type) {
	case int64:
		switch y := b.(type) {
		case int64:
			return cmpOrdered(x, y), nil
		case float64:
			return cmpOrdered(float64(x), y), nil
		}
	case float64:
		switch y := b.(type) {
		case int64:
			return cmpOrdered(x, float64(y)), nil
		case float64:
			return cmpOrdered(x, y), nil
		}
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	case []Value:
		if y, ok := b.([]Value); ok {
			for i := 0; i < len(x) && i < len(y); i++ {
				if !equal(x[i], y[i]) {
					return compare(op, x[i], y[i])
				}
			}
			return cmpOrdered(len(x), len(y)), nil
		}
	}
	if u, ok := a.(Undefined); ok {
		return 0, undefErr(u)
	}
	if u, ok := b.(Undefined); ok {
		return 0, undefErr(u)
	}
	return 0, typeErr("'%s' not supported between instances of '%s' and '%s'", op, typeName(a), typeName(b))
}

// ordered is Python's a < b, a > b, a <= b or a >= b, by op.
func ordered(op string, a, b Value) (bool, error) {
	c, err := compare(op, a, b)
	switch op {
	case "<":
		return c < 0, err
	case ">":
		return c > 0, err
	case "<=":
		return c <= 0, err
	}
	return c >= 0, err
}

func cmpOrdered[T int | int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// FromJSON decodes JSON into values, keeping object key order (tojson prints keys in the
// order they came). Numbers written with a fraction or exponent are floats, others ints.
func FromJSON(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSON(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("jinja: trailing data after the JSON value")
	}
	return v, nil
}

const maxJSONDepth = 100

func decodeJSON(dec *json.Decoder, depth int) (Value, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("jinja: JSON nests deeper than %d", maxJSONDepth)
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '[':
			l := []Value{}
			for dec.More() {
				v, err := decodeJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			_, err := dec.Token()
			return l, err
		case '{':
			d := NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.Set(k.(string), v)
			}
			_, err := dec.Token()
			return d, err
		}
		return nil, fmt.Errorf("jinja: unexpected %v in JSON", t)
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				return n, nil
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("jinja: JSON number %s: %w", s, err)
		}
		return f, nil
	case nil, bool, string:
		return t, nil
	}
	return nil, fmt.Errorf("jinja: unexpected JSON token %v", t)
}

// toJSON is transformers' tojson: json.dumps with ensure_ascii=False by default, ", " and
// ": " separators (",", ":" with indent), no HTML escaping, keys in order (sorted with
// sortKeys), floats as Python prints them.
func toJSON(b *strings.Builder, v Value, o jsonOpts, level int) error {
	if level > maxJSONDepth {
		return typeErr("tojson: value nests deeper than %d", maxJSONDepth)
	}
	newline := func(l int) {
		if o.indent != nil {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(*o.indent, l))
		}
	}
	switch v := v.(type) {
	case nil, Undefined:
		b.WriteString("null")
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		switch {
		case math.IsNaN(v):
			b.WriteString("NaN")
		case math.IsInf(v, 1):
			b.WriteString("Infinity")
		case math.IsInf(v, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloat(v))
		}
	case string:
		jsonString(b, v, o.ensureASCII)
	case Tuple:
		return toJSON(b, []Value(v), o, level)
	case []Value:
		if len(v) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(level + 1)
			if err := toJSON(b, x, o, level+1); err != nil {
				return err
			}
		}
		newline(level)
		b.WriteByte(']')
	case *Dict:
		if v.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := v.keys
		if o.sortKeys {
			keys = append([]string(nil), keys...)
			slices.Sort(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(level + 1)
			jsonString(b, k, o.ensureASCII)
			b.WriteString(o.keySep)
			if err := toJSON(b, v.m[k], o, level+1); err != nil {
				return err
			}
		}
		newline(level)
		b.WriteByte('}')
	case *namespace:
		return toJSON(b, v.attrs, o, level)
	default:
		return typeErr("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

type jsonOpts struct {
	ensureASCII     bool
	indent          *string
	itemSep, keySep string
	sortKeys        bool
}

// jsonString writes s as Python's json module does: only ", \ and control characters escaped
// (non-ASCII too with ensureASCII, as \uXXXX and surrogate pairs).
func jsonString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			fmt.Fprintf(b, `\u%04x`, r)
		case ensureASCII && r > 0x7e:
			if r > 0xffff {
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			} else {
				fmt.Fprintf(b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}
