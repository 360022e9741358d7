package jinja

import (
	"fmt"
	"html"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// arg returns positional argument i or keyword name, else def.
func arg(pos []Value, kw *Dict, i int, name string, def Value) Value {
	if i >= 0 && i < len(pos) {
		return pos[i]
	}
	if kw != nil {
		if v, ok := kw.Get(name); ok {
			return v
		}
	}
	return def
}

func intArg(v Value, what string) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case bool:
		return boolInt(v), nil
	}
	return 0, typeErr("%s must be an integer, not '%s'", what, typeName(v))
}

func strArg(v Value, what string) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", typeErr("%s must be str, not %s", what, typeName(v))
}

var builtinGlobals = map[string]Value{
	"range": &function{name: "range", call: func(e *evaluator, pos []Value, kw *Dict) (Value, error) {
		var b [3]int64
		b[2] = 1
		if len(pos) == 0 || len(pos) > 3 {
			return nil, typeErr("range expected 1 to 3 arguments, got %d", len(pos))
		}
		for i, p := range pos {
			n, err := intArg(p, "range() argument")
			if err != nil {
				return nil, err
			}
			b[i] = n
		}
		start, stop, step := int64(0), b[0], int64(1)
		if len(pos) > 1 {
			start, stop, step = b[0], b[1], b[2]
		}
		if step == 0 {
			return nil, &Error{Kind: "ValueError", Msg: "range() arg 3 must not be zero"}
		}
		// Counted in uint64: the span of two int64s does not overflow there.
		var n uint64
		if step > 0 && stop > start {
			n = (uint64(stop)-uint64(start)-1)/uint64(step) + 1
		} else if step < 0 && stop < start {
			n = (uint64(start)-uint64(stop)-1)/uint64(-step) + 1
		}
		if err := e.charge(int(min(n, math.MaxInt32/16)) * 16); err != nil {
			return nil, err
		}
		out := make([]Value, n)
		for i := range out {
			out[i] = start + int64(i)*step
		}
		return out, nil
	}},
	"namespace": &function{name: "namespace", call: func(e *evaluator, pos []Value, kw *Dict) (Value, error) {
		ns := &namespace{attrs: NewDict()}
		for _, p := range pos {
			d, ok := p.(*Dict)
			if !ok {
				return nil, typeErr("namespace() takes a dict, not '%s'", typeName(p))
			}
			for _, k := range d.keys {
				ns.attrs.Set(k, d.m[k])
			}
		}
		if kw != nil {
			for _, k := range kw.keys {
				ns.attrs.Set(k, kw.m[k])
			}
		}
		return ns, nil
	}},
	"dict": &function{name: "dict", call: func(e *evaluator, pos []Value, kw *Dict) (Value, error) {
		d := NewDict()
		for _, p := range pos {
			src, ok := p.(*Dict)
			if !ok {
				return nil, typeErr("dict() takes a dict, not '%s'", typeName(p))
			}
			for _, k := range src.keys {
				d.Set(k, src.m[k])
			}
		}
		if kw != nil {
			for _, k := range kw.keys {
				d.Set(k, kw.m[k])
			}
		}
		return d, nil
	}},
	"raise_exception": &function{name: "raise_exception", call: func(e *evaluator, pos []Value, kw *Dict) (Value, error) {
		return nil, &Error{Kind: "TemplateError", Msg: str(arg(pos, kw, 0, "message", ""))}
	}},
	"strftime_now": &function{name: "strftime_now", call: func(e *evaluator, pos []Value, kw *Dict) (Value, error) {
		f, err := strArg(arg(pos, kw, 0, "format", nil), "strftime_now() format")
		if err != nil {
			return nil, err
		}
		return strftime(time.Now(), f), nil
	}},
	"joiner": &function{name: "joiner", call: func(e *evaluator, pos []Value, kw *Dict) (Value, error) {
		sep := str(arg(pos, kw, 0, "sep", ", "))
		used := false
		return &function{name: "joiner", call: func(*evaluator, []Value, *Dict) (Value, error) {
			if !used {
				used = true
				return "", nil
			}
			return sep, nil
		}}, nil
	}},
}

// strftime formats t with Python's strftime directives.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		pad := true
		if f[i] == '-' && i+1 < len(f) { // glibc's %-d: no padding
			pad = false
			i++
		}
		num := func(n, width int) {
			if pad {
				fmt.Fprintf(&b, "%0*d", width, n)
			} else {
				fmt.Fprintf(&b, "%d", n)
			}
		}
		switch f[i] {
		case 'Y':
			num(t.Year(), 4)
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			num((t.Hour()+11)%12+1, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

// method returns v's method called name bound to v, or nil: the str and dict methods chat
// templates use. Lists and dicts have no mutating methods (the sandbox is immutable).
func method(v Value, name string) *function {
	bind := func(f func(pos []Value, kw *Dict) (Value, error)) *function {
		return &function{name: name, call: func(e *evaluator, pos []Value, kw *Dict) (Value, error) {
			if err := e.visit(v); err != nil {
				return nil, err
			}
			r, err := f(pos, kw)
			if s, ok := r.(string); ok && err == nil {
				err = e.charge(len(s))
			}
			return r, err
		}}
	}
	switch v := v.(type) {
	case string:
		switch name {
		case "startswith", "endswith":
			return bind(func(pos []Value, kw *Dict) (Value, error) {
				var cands []string
				switch p := arg(pos, kw, 0, "prefix", nil).(type) {
				case string:
					cands = []string{p}
				case Tuple:
					for _, c := range p {
						s, err := strArg(c, name+" tuple item")
						if err != nil {
							return nil, err
						}
						cands = append(cands, s)
					}
				default:
					return nil, typeErr("%s first arg must be str or a tuple of str, not %s", name, typeName(p))
				}
				for _, c := range cands {
					if name == "startswith" && strings.HasPrefix(v, c) || name == "endswith" && strings.HasSuffix(v, c) {
						return true, nil
					}
				}
				return false, nil
			})
		case "strip", "lstrip", "rstrip":
			return bind(func(pos []Value, kw *Dict) (Value, error) {
				return pyStrip(v, name, arg(pos, kw, 0, "chars", nil))
			})
		case "split", "rsplit":
			return bind(func(pos []Value, kw *Dict) (Value, error) {
				return pySplit(v, name == "rsplit", arg(pos, kw, 0, "sep", nil), arg(pos, kw, 1, "maxsplit", int64(-1)))
			})
		case "splitlines":
			return bind(func([]Value, *Dict) (Value, error) {
				var out []Value
				for _, l := range strings.Split(strings.ReplaceAll(strings.ReplaceAll(v, "\r\n", "\n"), "\r", "\n"), "\n") {
					out = append(out, l)
				}
				if n := len(out); n > 0 && out[n-1] == "" {
					out = out[:n-1]
				}
				return out, nil
			})
		case "upper":
			return bind(func([]Value, *Dict) (Value, error) { return strings.ToUpper(v), nil })
		case "lower":
			return bind(func([]Value, *Dict) (Value, error) { return strings.ToLower(v), nil })
		case "title":
			return bind(func([]Value, *Dict) (Value, error) { return pyTitle(v), nil })
		case "capitalize":
			return bind(func([]Value, *Dict) (Value, error) { return capitalize(v), nil })
		case "replace":
			return bind(func(pos []Value, kw *Dict) (Value, error) { return replace(v, pos, kw) })
		case "find", "rfind", "count":
			return bind(func(pos []Value, kw *Dict) (Value, error) {
				sub, err := strArg(arg(pos, kw, 0, "sub", nil), name+"() argument")
				if err != nil {
					return nil, err
				}
				switch name {
				case "find":
					return runeIndex(v, strings.Index(v, sub)), nil
				case "rfind":
					return runeIndex(v, strings.LastIndex(v, sub)), nil
				}
				if sub == "" {
					return int64(utf8.RuneCountInString(v) + 1), nil
				}
				return int64(strings.Count(v, sub)), nil
			})
		case "join":
			return bind(func(pos []Value, kw *Dict) (Value, error) {
				items, err := iterate(arg(pos, kw, 0, "iterable", nil))
				if err != nil {
					return nil, err
				}
				parts := make([]string, len(items))
				for i, it := range items {
					if parts[i], err = strArg(it, "sequence item"); err != nil {
						return nil, err
					}
				}
				return strings.Join(parts, v), nil
			})
		case "isdigit", "isalpha", "isspace", "isalnum", "isupper", "islower":
			return bind(func([]Value, *Dict) (Value, error) { return classify(v, name), nil })
		}
	case *Dict:
		switch name {
		case "items":
			return bind(func([]Value, *Dict) (Value, error) { return dictItems(v), nil })
		case "keys":
			return bind(func([]Value, *Dict) (Value, error) {
				out := make([]Value, len(v.keys))
				for i, k := range v.keys {
					out[i] = k
				}
				return out, nil
			})
		case "values":
			return bind(func([]Value, *Dict) (Value, error) {
				out := make([]Value, len(v.keys))
				for i, k := range v.keys {
					out[i] = v.m[k]
				}
				return out, nil
			})
		case "get":
			return bind(func(pos []Value, kw *Dict) (Value, error) {
				if k, ok := arg(pos, kw, 0, "key", nil).(string); ok {
					if x, ok := v.Get(k); ok {
						return x, nil
					}
				}
				return arg(pos, kw, 1, "default", nil), nil
			})
		}
	}
	return nil
}

func dictItems(d *Dict) []Value {
	out := make([]Value, len(d.keys))
	for i, k := range d.keys {
		out[i] = Tuple{k, d.m[k]}
	}
	return out
}

func runeIndex(s string, byteIndex int) int64 {
	if byteIndex < 0 {
		return -1
	}
	return int64(utf8.RuneCountInString(s[:byteIndex]))
}

// pyIsSpace is Python's str.isspace for one character.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

func pyStrip(s, which string, chars Value) (Value, error) {
	cut := pyIsSpace
	switch c := chars.(type) {
	case nil:
	case string:
		cut = func(r rune) bool { return strings.ContainsRune(c, r) }
	default:
		return nil, typeErr("%s arg must be None or str", which)
	}
	switch which {
	case "lstrip":
		return strings.TrimLeftFunc(s, cut), nil
	case "rstrip":
		return strings.TrimRightFunc(s, cut), nil
	}
	return strings.TrimFunc(s, cut), nil
}

func pySplit(s string, fromRight bool, sep, maxsplit Value) (Value, error) {
	n, err := intArg(maxsplit, "maxsplit")
	if err != nil {
		return nil, err
	}
	var parts []string
	switch sp := sep.(type) {
	case nil:
		// Runs of whitespace separate; leading and trailing whitespace gives no empty parts.
		if n < 0 {
			parts = strings.FieldsFunc(s, pyIsSpace)
			break
		}
		rest := s
		if fromRight {
			// What is left when maxsplit runs out keeps its leading whitespace.
			rest = strings.TrimRightFunc(rest, pyIsSpace)
			for n > 0 && rest != "" {
				i := strings.LastIndexFunc(rest, pyIsSpace)
				if i < 0 {
					break
				}
				_, w := utf8.DecodeRuneInString(rest[i:])
				parts = append([]string{rest[i+w:]}, parts...)
				rest = strings.TrimRightFunc(rest[:i], pyIsSpace)
				n--
			}
			if rest != "" {
				parts = append([]string{rest}, parts...)
			}
			break
		}
		rest = strings.TrimLeftFunc(rest, pyIsSpace)
		for n > 0 && rest != "" {
			i := strings.IndexFunc(rest, pyIsSpace)
			if i < 0 {
				break
			}
			parts = append(parts, rest[:i])
			rest = strings.TrimLeftFunc(rest[i:], pyIsSpace)
			n--
		}
		if rest != "" {
			parts = append(parts, rest)
		}
	case string:
		if sp == "" {
			return nil, &Error{Kind: "ValueError", Msg: "empty separator"}
		}
		switch {
		case n < 0:
			parts = strings.Split(s, sp)
		case fromRight:
			parts = strings.Split(s, sp)
			if len(parts) > int(n)+1 {
				k := len(parts) - int(n)
				parts = append([]string{strings.Join(parts[:k], sp)}, parts[k:]...)
			}
		default:
			parts = strings.SplitN(s, sp, int(n)+1)
		}
	default:
		return nil, typeErr("must be str or None, not %s", typeName(sep))
	}
	out := make([]Value, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

func replace(s string, pos []Value, kw *Dict) (Value, error) {
	old, err := strArg(arg(pos, kw, 0, "old", nil), "replace() argument 1")
	if err != nil {
		return nil, err
	}
	nw, err := strArg(arg(pos, kw, 1, "new", nil), "replace() argument 2")
	if err != nil {
		return nil, err
	}
	n, err := intArg(arg(pos, kw, 2, "count", int64(-1)), "replace() count")
	if err != nil {
		return nil, err
	}
	return strings.Replace(s, old, nw, int(n)), nil
}

func capitalize(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToUpper(r)) + strings.ToLower(s[n:])
}

// pyTitle is Python's str.title: a letter after a non-letter is upper-cased, others lowered.
func pyTitle(s string) string {
	var b strings.Builder
	prevLetter := false
	for _, r := range s {
		if unicode.IsLetter(r) {
			if prevLetter {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToTitle(r))
			}
			prevLetter = true
			continue
		}
		b.WriteRune(r)
		prevLetter = false
	}
	return b.String()
}

func classify(s, name string) bool {
	if s == "" {
		return false
	}
	cased := false
	for _, r := range s {
		switch name {
		case "isdigit":
			if !unicode.IsDigit(r) {
				return false
			}
		case "isalpha":
			if !unicode.IsLetter(r) {
				return false
			}
		case "isspace":
			if !pyIsSpace(r) {
				return false
			}
		case "isalnum":
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
				return false
			}
		case "isupper":
			if unicode.IsLower(r) {
				return false
			}
			cased = cased || unicode.IsUpper(r)
		case "islower":
			if unicode.IsUpper(r) {
				return false
			}
			cased = cased || unicode.IsLower(r)
		}
	}
	if name == "isupper" || name == "islower" {
		return cased
	}
	return true
}

// test evaluates "v is name(args)".
func test(name string, v Value, pos []Value) (bool, error) {
	argN := func(i int) Value {
		if i < len(pos) {
			return pos[i]
		}
		return Undefined{}
	}
	switch name {
	case "defined":
		_, u := v.(Undefined)
		return !u, nil
	case "undefined":
		_, u := v.(Undefined)
		return u, nil
	case "none":
		return v == nil, nil
	case "string":
		_, ok := v.(string)
		return ok, nil
	case "number":
		switch v.(type) {
		case int64, float64, bool:
			return true, nil
		}
		return false, nil
	case "integer":
		_, ok := v.(int64)
		return ok, nil
	case "float":
		_, ok := v.(float64)
		return ok, nil
	case "boolean":
		_, ok := v.(bool)
		return ok, nil
	case "true":
		b, ok := v.(bool)
		return ok && b, nil
	case "false":
		b, ok := v.(bool)
		return ok && !b, nil
	case "mapping":
		switch v.(type) {
		case *Dict:
			return true, nil
		}
		return false, nil
	case "iterable":
		switch v.(type) {
		case string, []Value, Tuple, *Dict, Undefined:
			return true, nil
		}
		return false, nil
	case "sequence":
		switch v.(type) {
		case string, []Value, Tuple, *Dict:
			return true, nil
		}
		return false, nil
	case "callable":
		switch v.(type) {
		case *function:
			return true, nil
		}
		return false, nil
	case "odd", "even":
		n, err := intArg(v, "value")
		if err != nil {
			return false, err
		}
		return (n%2 != 0) == (name == "odd"), nil
	case "divisibleby":
		n, err := intArg(v, "value")
		if err != nil {
			return false, err
		}
		d, err := intArg(argN(0), "divisor")
		if err != nil || d == 0 {
			return false, err
		}
		return n%d == 0, nil
	case "eq", "equalto", "==":
		return equal(v, argN(0)), nil
	case "ne", "!=":
		return !equal(v, argN(0)), nil
	case "lt", "lessthan", "<", "gt", "greaterthan", ">", "le", "<=", "ge", ">=":
		op := map[string]string{"lt": "<", "lessthan": "<", "gt": ">", "greaterthan": ">", "le": "<=", "ge": ">="}[name]
		if op == "" {
			op = name
		}
		return ordered(op, v, argN(0))
	case "in":
		return contained(v, argN(0))
	case "sameas":
		w := argN(0)
		switch v.(type) {
		case nil, bool:
			return v == w, nil
		}
		return equal(v, w), nil
	case "lower":
		s, ok := v.(string)
		return ok && s == strings.ToLower(s), nil
	case "upper":
		s, ok := v.(string)
		return ok && s == strings.ToUpper(s), nil
	case "escaped":
		return false, nil
	}
	return false, &Error{Kind: "TemplateAssertionError", Msg: fmt.Sprintf("no test named '%s'", name)}
}

type filterFunc func(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error)

var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"tojson":     filterToJSON,
		"length":     filterLength,
		"count":      filterLength,
		"string":     func(e *evaluator, v Value, _ []Value, _ *Dict) (Value, error) { return str(v), nil },
		"safe":       func(e *evaluator, v Value, _ []Value, _ *Dict) (Value, error) { return v, nil },
		"escape":     filterEscape,
		"e":          filterEscape,
		"trim":       filterTrim,
		"upper":      strFilter(strings.ToUpper),
		"lower":      strFilter(strings.ToLower),
		"capitalize": strFilter(capitalize),
		"title":      strFilter(pyTitle),
		"replace": func(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
			return replace(str(v), pos, kw)
		},
		"default": filterDefault,
		"d":       filterDefault,
		"join":    filterJoin,
		"first":   filterFirstLast(true),
		"last":    filterFirstLast(false),
		"list": func(e *evaluator, v Value, _ []Value, _ *Dict) (Value, error) {
			items, err := iterate(v)
			return append([]Value{}, items...), err
		},
		"reverse": func(e *evaluator, v Value, _ []Value, _ *Dict) (Value, error) {
			if s, ok := v.(string); ok {
				r := []rune(s)
				slices.Reverse(r)
				return string(r), nil
			}
			items, err := iterate(v)
			out := slices.Clone(items)
			slices.Reverse(out)
			return out, err
		},
		"items": func(e *evaluator, v Value, _ []Value, _ *Dict) (Value, error) {
			switch d := v.(type) {
			case *Dict:
				return dictItems(d), nil
			case Undefined:
				return []Value{}, nil
			}
			return nil, typeErr("can only get item pairs from a mapping")
		},
		"dictsort":   filterDictsort,
		"sort":       filterSort,
		"unique":     filterUnique,
		"map":        filterMap,
		"select":     filterSelect(false, false),
		"reject":     filterSelect(true, false),
		"selectattr": filterSelect(false, true),
		"rejectattr": filterSelect(true, true),
		"attr": func(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
			return getAttr(v, str(arg(pos, kw, 0, "name", "")))
		},
		"int":    filterInt,
		"float":  filterFloat,
		"abs":    filterAbs,
		"round":  filterRound,
		"indent": filterIndent,
		"wordcount": func(e *evaluator, v Value, _ []Value, _ *Dict) (Value, error) {
			return int64(len(strings.Fields(str(v)))), nil
		},
		"sum":   filterSum,
		"max":   filterMinMax(1),
		"min":   filterMinMax(-1),
		"batch": filterBatch,
		"center": func(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
			w, err := intArg(arg(pos, kw, 0, "width", int64(80)), "width")
			s := str(v)
			if n := int(w) - utf8.RuneCountInString(s); err == nil && n > 0 && n < 1<<16 {
				left := n / 2
				if n%2 == 1 && int(w)%2 == 1 {
					left++
				}
				s = strings.Repeat(" ", left) + s + strings.Repeat(" ", n-left)
			}
			return s, err
		},
	}
}

func strFilter(f func(string) string) filterFunc {
	return func(e *evaluator, v Value, _ []Value, _ *Dict) (Value, error) { return f(str(v)), nil }
}

func filterToJSON(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	o := jsonOpts{ensureASCII: truthy(arg(nil, kw, -1, "ensure_ascii", false)), itemSep: ", ", keySep: ": ",
		sortKeys: truthy(arg(nil, kw, -1, "sort_keys", false))}
	switch ind := arg(pos, kw, 0, "indent", nil).(type) {
	case nil:
	case int64:
		s := strings.Repeat(" ", int(max(0, min(ind, 64))))
		o.indent, o.itemSep = &s, ","
	case string:
		o.indent, o.itemSep = &ind, ","
	default:
		return nil, typeErr("tojson indent must be int or str")
	}
	if sep, err := iterate(arg(nil, kw, -1, "separators", nil)); err == nil && len(sep) == 2 {
		o.itemSep, o.keySep = str(sep[0]), str(sep[1])
	}
	var b strings.Builder
	if err := toJSON(&b, v, o, 0); err != nil {
		return nil, err
	}
	return b.String(), e.charge(b.Len())
}

func filterLength(e *evaluator, v Value, _ []Value, _ *Dict) (Value, error) {
	switch v := v.(type) {
	case string:
		return int64(utf8.RuneCountInString(v)), nil
	case []Value:
		return int64(len(v)), nil
	case Tuple:
		return int64(len(v)), nil
	case *Dict:
		return int64(v.Len()), nil
	case Undefined:
		return int64(0), nil
	}
	return nil, typeErr("object of type '%s' has no len()", typeName(v))
}

func filterEscape(e *evaluator, v Value, _ []Value, _ *Dict) (Value, error) {
	return html.EscapeString(str(v)), nil
}

func filterTrim(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	return pyStrip(str(v), "strip", arg(pos, kw, 0, "chars", nil))
}

func filterDefault(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	def := arg(pos, kw, 0, "default_value", "")
	_, undefined := v.(Undefined)
	if undefined || truthy(arg(pos, kw, 1, "boolean", false)) && !truthy(v) {
		return def, nil
	}
	return v, nil
}

func filterJoin(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	sep := str(arg(pos, kw, 0, "d", ""))
	attr := arg(pos, kw, 1, "attribute", nil)
	parts := make([]string, len(items))
	for i, it := range items {
		if attr != nil {
			if it, err = getItem(it, attr); err != nil {
				return nil, err
			}
		}
		parts[i] = str(it)
	}
	out := strings.Join(parts, sep)
	return out, e.charge(len(out))
}

func filterFirstLast(first bool) filterFunc {
	return func(e *evaluator, v Value, _ []Value, _ *Dict) (Value, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{}, nil
		}
		if first {
			return items[0], nil
		}
		return items[len(items)-1], nil
	}
}

// sortKey is what sort, unique, dictsort, min and max compare: the value, case-folded unless
// case_sensitive.
func sortKey(v Value, caseSensitive bool) Value {
	if s, ok := v.(string); ok && !caseSensitive {
		return strings.ToLower(s)
	}
	return v
}

func sortValues(e *evaluator, items []Value, key func(Value) Value, reverse bool) ([]Value, error) {
	if err := e.work(len(items) * bits.Len(uint(len(items)))); err != nil {
		return nil, err
	}
	out := slices.Clone(items)
	var err error
	sort.SliceStable(out, func(i, j int) bool {
		a, b := key(out[i]), key(out[j])
		if reverse {
			a, b = b, a
		}
		c, e := compare("<", a, b)
		if e != nil && err == nil {
			err = e
		}
		return c < 0
	})
	return out, err
}

func filterSort(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	reverse := truthy(arg(pos, kw, 0, "reverse", false))
	cs := truthy(arg(pos, kw, 1, "case_sensitive", false))
	attr := arg(pos, kw, 2, "attribute", nil)
	return sortValues(e, items, func(x Value) Value {
		if attr != nil {
			x, _ = getItem(x, attr)
		}
		return sortKey(x, cs)
	}, reverse)
}

func filterDictsort(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	d, ok := v.(*Dict)
	if !ok {
		return nil, typeErr("dictsort: '%s' is not a dict", typeName(v))
	}
	cs := truthy(arg(pos, kw, 0, "case_sensitive", false))
	by := str(arg(pos, kw, 1, "by", "key"))
	reverse := truthy(arg(pos, kw, 2, "reverse", false))
	i := 0
	if by == "value" {
		i = 1
	}
	return sortValues(e, dictItems(d), func(x Value) Value { return sortKey(x.(Tuple)[i], cs) }, reverse)
}

func filterUnique(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	cs := truthy(arg(pos, kw, 0, "case_sensitive", false))
	attr := arg(pos, kw, 1, "attribute", nil)
	var out, seen []Value
	for _, it := range items {
		k := it
		if attr != nil {
			k, _ = getItem(it, attr)
		}
		k = sortKey(k, cs)
		if err := e.work(len(seen)); err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(seen, func(s Value) bool { return equal(s, k) }) {
			seen = append(seen, k)
			out = append(out, it)
		}
	}
	return out, nil
}

func filterMap(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]Value, len(items))
	if attr := arg(nil, kw, -1, "attribute", nil); attr != nil {
		def := arg(nil, kw, -1, "default", nil)
		for i, it := range items {
			if out[i], err = getItem(it, attr); err != nil {
				return nil, err
			}
			if _, u := out[i].(Undefined); u && def != nil {
				out[i] = def
			}
		}
		return out, nil
	}
	if len(pos) == 0 {
		return nil, typeErr("map requires a filter name or attribute=")
	}
	name, err := strArg(pos[0], "map filter name")
	if err != nil {
		return nil, err
	}
	f, ok := filters[name]
	if !ok {
		return nil, &Error{Kind: "TemplateAssertionError", Msg: fmt.Sprintf("no filter named '%s'", name)}
	}
	for i, it := range items {
		if out[i], err = f(e, it, pos[1:], kw); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func filterSelect(reject, byAttr bool) filterFunc {
	return func(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		var attr Value
		if byAttr {
			if len(pos) == 0 {
				return nil, typeErr("selectattr and rejectattr need an attribute name")
			}
			attr, pos = pos[0], pos[1:]
		}
		var out []Value
		for _, it := range items {
			x := it
			if attr != nil {
				if x, err = getItem(it, attr); err != nil {
					return nil, err
				}
			}
			ok := truthy(x)
			if len(pos) > 0 {
				name, err := strArg(pos[0], "test name")
				if err != nil {
					return nil, err
				}
				if ok, err = test(name, x, pos[1:]); err != nil {
					return nil, err
				}
			}
			if ok != reject {
				out = append(out, it)
			}
		}
		return out, nil
	}
}

func filterInt(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	def := arg(pos, kw, 0, "default", int64(0))
	switch v := v.(type) {
	case int64:
		return v, nil
	case bool:
		return boolInt(v), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return def, nil
		}
		return int64(v), nil
	case string:
		s := strings.TrimSpace(v)
		if n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64); err == nil {
			return n, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return int64(f), nil
		}
	}
	return def, nil
}

func filterFloat(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	def := arg(pos, kw, 0, "default", 0.0)
	switch v := v.(type) {
	case int64:
		return float64(v), nil
	case bool:
		return float64(boolInt(v)), nil
	case float64:
		return v, nil
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			return f, nil
		}
	}
	return def, nil
}

func filterAbs(e *evaluator, v Value, _ []Value, _ *Dict) (Value, error) {
	switch v := v.(type) {
	case int64:
		if v < 0 {
			return -v, nil
		}
		return v, nil
	case float64:
		return math.Abs(v), nil
	case bool:
		return boolInt(v), nil
	}
	return nil, typeErr("bad operand type for abs(): '%s'", typeName(v))
}

// toFloat is a number's value as a float (bools count as 0 and 1, as in Python).
func toFloat(v Value) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case bool:
		return float64(boolInt(x)), true
	}
	return 0, false
}

func filterRound(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	f, ok := toFloat(v)
	if !ok {
		return nil, typeErr("round: '%s' is not a number", typeName(v))
	}
	prec, err := intArg(arg(pos, kw, 0, "precision", int64(0)), "precision")
	if err != nil {
		return nil, err
	}
	prec = max(-300, min(prec, 300))
	p := math.Pow(10, float64(prec))
	switch str(arg(pos, kw, 1, "method", "common")) {
	case "ceil":
		return math.Ceil(f*p) / p, nil
	case "floor":
		return math.Floor(f*p) / p, nil
	}
	if prec < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return math.RoundToEven(f*p) / p, nil
	}
	// Python's round: the decimal nearest the exact binary value, ties to even.
	r, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', int(prec), 64), 64)
	return r, nil
}

func filterIndent(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	width := arg(pos, kw, 0, "width", int64(4))
	pad := ""
	switch w := width.(type) {
	case int64:
		pad = strings.Repeat(" ", int(max(0, min(w, 256))))
	case string:
		pad = w
	}
	first := truthy(arg(pos, kw, 1, "first", false))
	blank := truthy(arg(pos, kw, 2, "blank", false))
	lines := strings.Split(str(v), "\n")
	for i, l := range lines {
		if i == 0 && !first || !blank && strings.TrimSpace(l) == "" && i > 0 {
			continue
		}
		lines[i] = pad + l
	}
	out := strings.Join(lines, "\n")
	return out, e.charge(len(out))
}

func filterSum(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	attr := arg(pos, kw, 0, "attribute", nil)
	var total Value = arg(pos, kw, 1, "start", int64(0))
	for _, it := range items {
		if attr != nil {
			if it, err = getItem(it, attr); err != nil {
				return nil, err
			}
		}
		if total, err = e.arith("+", total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func filterMinMax(sign int) filterFunc {
	return func(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{}, nil
		}
		cs := truthy(arg(pos, kw, 0, "case_sensitive", false))
		attr := arg(pos, kw, 1, "attribute", nil)
		key := func(x Value) Value {
			if attr != nil {
				x, _ = getItem(x, attr)
			}
			return sortKey(x, cs)
		}
		best := items[0]
		for _, it := range items[1:] {
			c, err := compare("<", key(it), key(best))
			if err != nil {
				return nil, err
			}
			if c*sign > 0 {
				best = it
			}
		}
		return best, nil
	}
}

func filterBatch(e *evaluator, v Value, pos []Value, kw *Dict) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	n, err := intArg(arg(pos, kw, 0, "linecount", nil), "linecount")
	if err != nil || n <= 0 {
		return nil, typeErr("batch needs a positive linecount")
	}
	fill, hasFill := arg(pos, kw, 1, "fill_with", nil), arg(pos, kw, 1, "fill_with", Undefined{}) != (Undefined{})
	var out []Value
	for i := 0; i < len(items); i += int(n) {
		row := slices.Clone(items[i:min(len(items), i+int(n))])
		for hasFill && len(row) < int(n) {
			row = append(row, fill)
		}
		out = append(out, row)
	}
	return out, nil
}
