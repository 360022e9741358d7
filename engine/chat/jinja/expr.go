package jinja

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

func (e *evaluator) eval(x expr, s *scope) (Value, error) {
	if err := e.step(); err != nil {
		return nil, err
	}
	switch x := x.(type) {
	case litE:
		return x.v, nil
	case nameE:
		if v, ok := s.get(x.name); ok {
			return v, nil
		}
		return Undefined{Name: x.name}, nil
	case attrE:
		v, err := e.eval(x.x, s)
		if err != nil {
			return nil, err
		}
		return getAttr(v, x.name)
	case itemE:
		v, err := e.eval(x.x, s)
		if err != nil {
			return nil, err
		}
		k, err := e.eval(x.key, s)
		if err != nil {
			return nil, err
		}
		return getItem(v, k)
	case sliceE:
		return e.slice(x, s)
	case callE:
		return e.call(x, s)
	case filterE:
		v, err := e.eval(x.x, s)
		if err != nil {
			return nil, err
		}
		return e.filter(x, v, s)
	case testE:
		v, err := e.eval(x.x, s)
		if err != nil {
			return nil, err
		}
		pos, _, err := e.evalArgs(x.args, s)
		if err != nil {
			return nil, err
		}
		ok, err := test(x.name, v, pos)
		return ok != x.neg, err
	case unaryE:
		v, err := e.eval(x.x, s)
		if err != nil {
			return nil, err
		}
		switch x.op {
		case "not":
			return !truthy(v), nil
		case "-":
			switch n := v.(type) {
			case int64:
				return -n, nil
			case float64:
				return -n, nil
			case bool:
				return -boolInt(n), nil
			}
			return nil, typeErr("bad operand type for unary -: '%s'", typeName(v))
		default:
			switch n := v.(type) {
			case int64, float64:
				return v, nil
			case bool:
				return boolInt(n), nil
			}
			return nil, typeErr("bad operand type for unary +: '%s'", typeName(v))
		}
	case binE:
		return e.binary(x, s)
	case condE:
		c, err := e.eval(x.cond, s)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return e.eval(x.a, s)
		}
		if x.b == nil {
			return Undefined{}, nil
		}
		return e.eval(x.b, s)
	case listE:
		l := make([]Value, len(x.items))
		for i, it := range x.items {
			v, err := e.eval(it, s)
			if err != nil {
				return nil, err
			}
			l[i] = v
		}
		if x.tuple {
			return Tuple(l), e.charge(16 * len(l))
		}
		return l, e.charge(16 * len(l))
	case dictE:
		d := NewDict()
		for i := range x.keys {
			k, err := e.eval(x.keys[i], s)
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, typeErr("dict keys must be strings here, got '%s'", typeName(k))
			}
			v, err := e.eval(x.vals[i], s)
			if err != nil {
				return nil, err
			}
			d.Set(ks, v)
		}
		return d, e.charge(32 * d.Len())
	}
	return nil, fmt.Errorf("jinja: unknown expression %T", x)
}

func (e *evaluator) binary(x binE, s *scope) (Value, error) {
	a, err := e.eval(x.a, s)
	if err != nil {
		return nil, err
	}
	switch x.op {
	case "and":
		if !truthy(a) {
			return a, nil
		}
		return e.eval(x.b, s)
	case "or":
		if truthy(a) {
			return a, nil
		}
		return e.eval(x.b, s)
	}
	b, err := e.eval(x.b, s)
	if err != nil {
		return nil, err
	}
	if err := e.visit(a); err != nil {
		return nil, err
	}
	if err := e.visit(b); err != nil {
		return nil, err
	}
	switch x.op {
	case "==":
		return equal(a, b), nil
	case "!=":
		return !equal(a, b), nil
	case "<", ">", "<=", ">=":
		return ordered(x.op, a, b)
	case "in", "not in":
		in, err := contained(a, b)
		return in == (x.op == "in"), err
	case "~":
		out := str(a) + str(b)
		return out, e.charge(len(out))
	}
	return e.arith(x.op, a, b)
}

// contained is Python's "a in b".
func contained(a, b Value) (bool, error) {
	switch b := b.(type) {
	case string:
		as, ok := a.(string)
		if !ok {
			return false, typeErr("'in <string>' requires string as left operand, not %s", typeName(a))
		}
		return strings.Contains(b, as), nil
	case []Value:
		for _, x := range b {
			if equal(a, x) {
				return true, nil
			}
		}
		return false, nil
	case Tuple:
		return contained(a, []Value(b))
	case *Dict:
		k, ok := a.(string)
		return ok && hasKey(b, k), nil
	case *namespace:
		return contained(a, b.attrs)
	case Undefined:
		return false, nil
	}
	return false, typeErr("argument of type '%s' is not iterable", typeName(b))
}

func (e *evaluator) arith(op string, a, b Value) (Value, error) {
	if u, ok := a.(Undefined); ok {
		return nil, undefErr(u)
	}
	if u, ok := b.(Undefined); ok {
		return nil, undefErr(u)
	}
	if x, ok := a.(bool); ok {
		a = boolInt(x)
	}
	if y, ok := b.(bool); ok {
		b = boolInt(y)
	}
	if x, ok := a.(Tuple); ok {
		if y, ok := b.(Tuple); ok && op == "+" {
			return Tuple(append(append([]Value{}, x...), y...)), e.charge(16 * (len(x) + len(y)))
		}
	}
	switch x := a.(type) {
	case string:
		switch op {
		case "+":
			y, ok := b.(string)
			if !ok {
				return nil, typeErr(`can only concatenate str (not "%s") to str`, typeName(b))
			}
			return x + y, e.charge(len(x) + len(y))
		case "*":
			n, ok := b.(int64)
			if !ok {
				return nil, typeErr("can't multiply sequence by non-int of type '%s'", typeName(b))
			}
			if n <= 0 {
				return "", nil
			}
			if err := e.charge(int(min(n, math.MaxInt32)) * max(len(x), 1)); err != nil {
				return nil, err
			}
			return strings.Repeat(x, int(n)), nil
		case "%":
			out, err := printf(x, b)
			if err == nil {
				err = e.charge(len(out))
			}
			return out, err
		}
	case []Value:
		switch op {
		case "+":
			y, ok := b.([]Value)
			if !ok {
				return nil, typeErr(`can only concatenate list (not "%s") to list`, typeName(b))
			}
			out := append(append(make([]Value, 0, len(x)+len(y)), x...), y...)
			return out, e.charge(16 * len(out))
		case "*":
			n, ok := b.(int64)
			if !ok {
				return nil, typeErr("can't multiply sequence by non-int of type '%s'", typeName(b))
			}
			var out []Value
			if n > 0 {
				if err := e.charge(16 * int(min(n, math.MaxInt32)) * max(len(x), 1)); err != nil {
					return nil, err
				}
				for range n {
					out = append(out, x...)
				}
			}
			return out, nil
		}
	case int64:
		if y, ok := b.(int64); ok {
			return intArith(op, x, y)
		}
		if y, ok := b.(float64); ok {
			return floatArith(op, float64(x), y)
		}
		if op == "*" {
			if _, ok := b.(string); ok {
				return e.arith(op, b, a)
			}
		}
	case float64:
		if y, ok := b.(int64); ok {
			return floatArith(op, x, float64(y))
		}
		if y, ok := b.(float64); ok {
			return floatArith(op, x, y)
		}
	}
	return nil, typeErr("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(a), typeName(b))
}

// errOverflow stands in for Python's unbounded ints: a result past int64 fails rather than
// wrapping around.
var errOverflow = &Error{Kind: "OverflowError", Msg: "integer result does not fit in 64 bits"}

func intArith(op string, x, y int64) (Value, error) {
	switch op {
	case "+":
		if r := x + y; (r > x) == (y > 0) {
			return r, nil
		}
		return nil, errOverflow
	case "-":
		if r := x - y; (r < x) == (y > 0) {
			return r, nil
		}
		return nil, errOverflow
	case "*":
		if x == 0 || y == 0 {
			return int64(0), nil
		}
		if r := x * y; r/y == x && !(x == -1 && y == math.MinInt64) && !(y == -1 && x == math.MinInt64) {
			return r, nil
		}
		return nil, errOverflow
	case "/":
		if y == 0 {
			return nil, &Error{Kind: "ZeroDivisionError", Msg: "division by zero"}
		}
		return float64(x) / float64(y), nil
	case "//", "%":
		if y == 0 {
			return nil, &Error{Kind: "ZeroDivisionError", Msg: "integer division or modulo by zero"}
		}
		q, r := x/y, x%y
		if r != 0 && (r < 0) != (y < 0) {
			q--
			r += y
		}
		if op == "//" {
			return q, nil
		}
		return r, nil
	case "**":
		if y < 0 {
			return math.Pow(float64(x), float64(y)), nil
		}
		r := int64(1)
		for range min(y, 64) {
			v, err := intArith("*", r, x)
			if err != nil {
				return nil, err
			}
			r = v.(int64)
		}
		if y > 64 && x != 0 && x != 1 && x != -1 {
			return nil, errOverflow
		}
		if y > 64 && x == -1 && y%2 == 1 {
			return int64(-1), nil
		}
		return r, nil
	}
	return nil, typeErr("unsupported operand %s for int", op)
}

func floatArith(op string, x, y float64) (Value, error) {
	switch op {
	case "+":
		return x + y, nil
	case "-":
		return x - y, nil
	case "*":
		return x * y, nil
	case "/", "//", "%":
		if y == 0 {
			return nil, &Error{Kind: "ZeroDivisionError", Msg: "float division by zero"}
		}
		switch op {
		case "/":
			return x / y, nil
		case "//":
			return math.Floor(x / y), nil
		}
		r := math.Mod(x, y)
		if r != 0 && (r < 0) != (y < 0) {
			r += y
		}
		return r, nil
	case "**":
		return math.Pow(x, y), nil
	}
	return nil, typeErr("unsupported operand %s for float", op)
}

// getAttr is jinja2's x.name: a method or attribute of the value first, then its item.
func getAttr(v Value, name string) (Value, error) {
	switch v := v.(type) {
	case Undefined:
		return nil, undefErr(v)
	case *Dict:
		if m := method(v, name); m != nil {
			return m, nil
		}
		if x, ok := v.Get(name); ok {
			return x, nil
		}
		return Undefined{Name: name}, nil
	case *namespace:
		if x, ok := v.attrs.Get(name); ok {
			return x, nil
		}
		return Undefined{Name: name}, nil
	case *loop:
		if name == "__call__" || v.recurse != nil && name == "recurse" {
			return v.recurse, nil
		}
		return v.attr(name), nil
	}
	if m := method(v, name); m != nil {
		return m, nil
	}
	return Undefined{Name: name}, nil
}

// getItem is jinja2's x[key]: the item first, then an attribute of that name.
func getItem(v Value, k Value) (Value, error) {
	switch v := v.(type) {
	case Undefined:
		return nil, undefErr(v)
	case []Value:
		if i, ok := index(k, len(v)); ok {
			return v[i], nil
		}
	case Tuple:
		if i, ok := index(k, len(v)); ok {
			return v[i], nil
		}
	case string:
		r := []rune(v)
		if i, ok := index(k, len(r)); ok {
			return string(r[i]), nil
		}
	case *Dict:
		if ks, ok := k.(string); ok {
			if x, ok := v.Get(ks); ok {
				return x, nil
			}
		}
	}
	if ks, ok := k.(string); ok {
		return getAttr(v, ks)
	}
	return Undefined{}, nil
}

// index turns a Python index (negative counts from the end) into a Go one.
func index(k Value, n int) (int, bool) {
	var i int64
	switch k := k.(type) {
	case int64:
		i = k
	case bool:
		i = boolInt(k)
	default:
		return 0, false
	}
	if i < 0 {
		i += int64(n)
	}
	return int(i), i >= 0 && i < int64(n)
}

func (e *evaluator) slice(x sliceE, s *scope) (Value, error) {
	v, err := e.eval(x.x, s)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, part := range []expr{x.lo, x.hi, x.step} {
		if part == nil {
			continue
		}
		b, err := e.eval(part, s)
		if err != nil {
			return nil, err
		}
		switch b := b.(type) {
		case nil:
		case int64:
			bounds[i] = &b
		default:
			return nil, typeErr("slice indices must be integers or None")
		}
	}
	var items []Value
	var runes []rune
	n := 0
	switch v := v.(type) {
	case []Value:
		items, n = v, len(v)
	case Tuple:
		items, n = v, len(v)
	case string:
		runes = []rune(v)
		n = len(runes)
	case Undefined:
		return nil, undefErr(v)
	default:
		return nil, typeErr("'%s' object is not subscriptable", typeName(v))
	}
	idx, err := sliceIndices(bounds, n)
	if err != nil {
		return nil, err
	}
	if _, ok := v.(string); ok {
		out := make([]rune, len(idx))
		for i, j := range idx {
			out[i] = runes[j]
		}
		return string(out), nil
	}
	out := make([]Value, len(idx))
	for i, j := range idx {
		out[i] = items[j]
	}
	return out, e.charge(16 * len(out))
}

// sliceIndices lists the indices Python's seq[lo:hi:step] visits.
func sliceIndices(b [3]*int64, n int) ([]int, error) {
	step := int64(1)
	if b[2] != nil {
		step = *b[2]
	}
	if step == 0 {
		return nil, &Error{Kind: "ValueError", Msg: "slice step cannot be zero"}
	}
	lower, upper := int64(0), int64(n)
	if step < 0 {
		lower, upper = -1, int64(n)-1
	}
	adjust := func(p *int64, def int64) int64 {
		if p == nil {
			return def
		}
		i := *p
		if i < 0 {
			i += int64(n)
		}
		return max(lower, min(i, upper))
	}
	var out []int
	if step > 0 {
		for i, stop := adjust(b[0], lower), adjust(b[1], upper); i < stop; i += step {
			out = append(out, int(i))
		}
	} else {
		for i, stop := adjust(b[0], upper), adjust(b[1], lower); i > stop; i += step {
			out = append(out, int(i))
		}
	}
	return out, nil
}

func (e *evaluator) evalArgs(a args, s *scope) ([]Value, *Dict, error) {
	pos := make([]Value, len(a.pos))
	for i, x := range a.pos {
		v, err := e.eval(x, s)
		if err != nil {
			return nil, nil, err
		}
		pos[i] = v
	}
	var kw *Dict
	if len(a.kwNames) > 0 {
		kw = NewDict()
		for i, name := range a.kwNames {
			v, err := e.eval(a.kwVals[i], s)
			if err != nil {
				return nil, nil, err
			}
			kw.Set(name, v)
		}
	}
	return pos, kw, nil
}

func (e *evaluator) call(x callE, s *scope) (Value, error) {
	fv, err := e.eval(x.fn, s)
	if err != nil {
		return nil, err
	}
	pos, kw, err := e.evalArgs(x.args, s)
	if err != nil {
		return nil, err
	}
	for _, p := range pos {
		if err := e.visit(p); err != nil {
			return nil, err
		}
	}
	switch f := fv.(type) {
	case *function:
		return f.call(e, pos, kw)
	case *loop:
		if f.recurse != nil {
			return f.recurse.call(e, pos, kw)
		}
	case Undefined:
		return nil, undefErr(f)
	}
	return nil, typeErr("'%s' object is not callable", typeName(fv))
}

func (e *evaluator) filter(f filterE, v Value, s *scope) (Value, error) {
	fn, ok := filters[f.name]
	if !ok {
		return nil, &Error{Kind: "TemplateAssertionError", Msg: fmt.Sprintf("no filter named '%s'", f.name)}
	}
	pos, kw, err := e.evalArgs(f.args, s)
	if err != nil {
		return nil, err
	}
	if err := e.visit(v); err != nil {
		return nil, err
	}
	return fn(e, v, pos, kw)
}

// printf is Python's "format % args" for the conversions templates use: %s %r %d %i %f %x
// %%, with an optional precision for %f.
func printf(format string, a Value) (string, error) {
	args := []Value{a}
	if t, ok := a.(Tuple); ok {
		args = t
	}
	var b strings.Builder
	next := 0
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		j := i + 1
		for j < len(format) && (format[j] == '.' || format[j] >= '0' && format[j] <= '9') {
			j++
		}
		if j >= len(format) {
			return "", &Error{Kind: "ValueError", Msg: "incomplete format"}
		}
		spec, verb := format[i+1:j], format[j]
		i = j
		if verb == '%' {
			b.WriteByte('%')
			continue
		}
		if next >= len(args) {
			return "", typeErr("not enough arguments for format string")
		}
		v := args[next]
		next++
		switch verb {
		case 's':
			b.WriteString(str(v))
		case 'r':
			b.WriteString(repr(v))
		case 'd', 'i', 'x', 'f':
			f, ok := toFloat(v)
			if !ok {
				return "", typeErr("%%%c format: a real number is required, not %s", verb, typeName(v))
			}
			switch verb {
			case 'f':
				prec := 6
				if _, p, ok := strings.Cut(spec, "."); ok {
					fmt.Sscan(p, &prec)
				}
				b.WriteString(strconv.FormatFloat(f, 'f', max(0, min(prec, 100)), 64))
			case 'x':
				b.WriteString(strconv.FormatInt(int64(f), 16))
			default:
				b.WriteString(strconv.FormatInt(int64(f), 10))
			}
		default:
			return "", &Error{Kind: "ValueError", Msg: fmt.Sprintf("unsupported format character '%c'", verb)}
		}
	}
	if next < len(args) && len(args) > 1 {
		return "", typeErr("not all arguments converted during string formatting")
	}
	return b.String(), nil
}
