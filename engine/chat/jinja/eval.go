// Package jinja renders Jinja templates the way Hugging Face transformers renders chat
// templates with Python's jinja2: trim_blocks, lstrip_blocks, loop controls, an immutable
// sandbox (no list or dict is mutated, only namespaces take assignments), transformers'
// tojson, raise_exception and strftime_now, and Python's semantics for values — "a" + None is
// a TypeError, None prints as "None", 3.0 prints as "3.0".
//
// It is written for templates that come from outside (a GGUF file's tokenizer.chat_template):
// every render runs under Limits on time, output and memory, and nesting is bounded at parse
// and run time, so a hostile template fails with an error instead of hanging or exhausting
// the process.
package jinja

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Limits bound one render. Zero fields take the defaults below.
type Limits struct {
	// Timeout bounds the render's wall time (default 2 s; a real chat template renders in
	// well under a millisecond per message).
	Timeout time.Duration
	// MaxOutput bounds the rendered text in bytes (default 16 MiB).
	MaxOutput int
	// MaxAlloc bounds the bytes of strings and lists the render builds, output included
	// (default 8 × MaxOutput), so that doubling a string in a loop fails early.
	MaxAlloc int
}

const (
	defaultTimeout   = 2 * time.Second
	defaultMaxOutput = 16 << 20
	maxCallDepth     = 64 // macro calls and recursive loops
	maxSourceBytes   = 1 << 20
)

func (l Limits) withDefaults() Limits {
	if l.Timeout <= 0 {
		l.Timeout = defaultTimeout
	}
	if l.MaxOutput <= 0 {
		l.MaxOutput = defaultMaxOutput
	}
	if l.MaxAlloc <= 0 {
		l.MaxAlloc = 8 * l.MaxOutput
	}
	return l
}

// Template is a compiled template; it is safe for concurrent renders.
type Template struct {
	body []node
}

// Compile parses src.
func Compile(src string) (*Template, error) {
	if len(src) > maxSourceBytes {
		return nil, &Error{Kind: "TemplateSyntaxError", Msg: fmt.Sprintf("template is %d bytes, more than the limit of %d", len(src), maxSourceBytes)}
	}
	body, err := parse(src)
	if err != nil {
		return nil, err
	}
	return &Template{body: body}, nil
}

// Render runs the template with vars as its global variables (values as Value documents).
func (t *Template) Render(vars map[string]Value, lim Limits) (string, error) {
	lim = lim.withDefaults()
	e := &evaluator{lim: lim, deadline: time.Now().Add(lim.Timeout)}
	e.globals = newScope(nil)
	for k, v := range builtinGlobals {
		e.globals.vars[k] = v
	}
	for k, v := range vars {
		e.globals.vars[k] = v
	}
	var out strings.Builder
	e.out = &out
	err := e.nodes(t.body, e.globals)
	switch {
	case errors.Is(err, errBreak), errors.Is(err, errContinue):
		return "", &Error{Kind: "TemplateSyntaxError", Msg: "break or continue outside a loop"}
	case err != nil:
		return "", err
	}
	return out.String(), nil
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

type scope struct {
	vars   map[string]Value
	parent *scope
}

func newScope(parent *scope) *scope { return &scope{vars: map[string]Value{}, parent: parent} }

func (s *scope) get(name string) (Value, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

type evaluator struct {
	lim      Limits
	deadline time.Time
	steps    int // work done: nodes, expressions, items visited by builtins
	checked  int // steps at the last look at the clock
	alloc    int // bytes built so far
	depth    int // macro calls and recursive loops in progress
	out      *strings.Builder
	globals  *scope
	line     int // of the statement running, for errors
}

// step counts one node or expression.
func (e *evaluator) step() error { return e.work(1) }

// work counts n units of work (a builtin visiting n items counts n) and looks at the clock
// every 1024, so that no run of cheap steps, nor one expensive builtin, outlives the timeout.
func (e *evaluator) work(n int) error {
	e.steps += n
	if e.steps-e.checked >= 1024 {
		e.checked = e.steps
		if time.Now().After(e.deadline) {
			return fmt.Errorf("%w: the template ran longer than %v", ErrLimit, e.lim.Timeout)
		}
	}
	return nil
}

// charge accounts for n bytes the render builds (and for the work of building them).
func (e *evaluator) charge(n int) error {
	e.alloc += n
	if e.alloc > e.lim.MaxAlloc {
		return fmt.Errorf("%w: the template built more than %d bytes", ErrLimit, e.lim.MaxAlloc)
	}
	return e.work(n / 1024)
}

// visit accounts for a builtin that walks v (a list, dict or string): linear work.
func (e *evaluator) visit(v Value) error {
	switch v := v.(type) {
	case []Value:
		return e.work(len(v))
	case Tuple:
		return e.work(len(v))
	case *Dict:
		return e.work(v.Len())
	case string:
		return e.work(len(v) / 64)
	}
	return nil
}

func (e *evaluator) write(s string) error {
	if e.out.Len()+len(s) > e.lim.MaxOutput {
		return fmt.Errorf("%w: the output is larger than %d bytes", ErrLimit, e.lim.MaxOutput)
	}
	if err := e.charge(len(s)); err != nil {
		return err
	}
	e.out.WriteString(s)
	return nil
}

// located adds the running statement's line to a template error that has none.
func (e *evaluator) located(err error) error {
	var te *Error
	if errors.As(err, &te) && te.Line == 0 && e.line > 0 {
		te.Line = e.line
	}
	return err
}

func (e *evaluator) nodes(ns []node, s *scope) error {
	for _, n := range ns {
		if err := e.node(n, s); err != nil {
			return err
		}
	}
	return nil
}

func (e *evaluator) node(n node, s *scope) error {
	if err := e.step(); err != nil {
		return err
	}
	switch n := n.(type) {
	case textN:
		return e.write(n.s)
	case outN:
		e.line = n.line
		v, err := e.eval(n.x, s)
		if err != nil {
			return e.located(err)
		}
		return e.write(str(v))
	case ifN:
		e.line = n.line
		for i, c := range n.conds {
			v, err := e.eval(c, s)
			if err != nil {
				return e.located(err)
			}
			if truthy(v) {
				return e.nodes(n.bodies[i], s)
			}
		}
		return e.nodes(n.els, s)
	case forN:
		e.line = n.line
		return e.located(e.forLoop(n, s))
	case setN:
		e.line = n.line
		return e.located(e.set(n, s))
	case setBlockN:
		e.line = n.line
		v, err := e.filtered(n.body, n.filters, s)
		s.vars[n.name] = v
		return err
	case macroN:
		s.vars[n.name] = e.macro(n, s)
		return nil
	case callBlockN:
		e.line = n.line
		caller := &function{name: "caller", call: func(e *evaluator, pos []Value, kw *Dict) (Value, error) {
			cs := newScope(s)
			for i, p := range n.params {
				cs.vars[p] = Undefined{Name: p}
				if i < len(pos) {
					cs.vars[p] = pos[i]
				}
			}
			return e.capture(n.body, cs)
		}}
		cs := newScope(s)
		cs.vars["caller"] = caller
		v, err := e.eval(n.call, cs)
		if err != nil {
			return e.located(err)
		}
		return e.write(str(v))
	case filterBlockN:
		e.line = n.line
		v, err := e.filtered(n.body, n.filters, s)
		if err != nil {
			return err
		}
		return e.write(str(v))
	case breakN:
		return errBreak
	case continueN:
		return errContinue
	}
	return fmt.Errorf("jinja: unknown node %T", n)
}

// filtered renders body into a string and applies filters to it.
func (e *evaluator) filtered(body []node, filters []filterE, s *scope) (Value, error) {
	var v Value
	v, err := e.capture(body, s)
	if err != nil {
		return nil, err
	}
	for _, f := range filters {
		if v, err = e.filter(f, v, s); err != nil {
			return nil, e.located(err)
		}
	}
	return v, nil
}

// capture renders body into a string instead of the output.
func (e *evaluator) capture(body []node, s *scope) (string, error) {
	saved := e.out
	var b strings.Builder
	e.out = &b
	err := e.nodes(body, s)
	e.out = saved
	return b.String(), err
}

func (e *evaluator) set(n setN, s *scope) error {
	v, err := e.eval(n.x, s)
	if err != nil {
		return err
	}
	switch {
	case len(n.targets) == 0: // {% do %}
		return nil
	case n.attr != "":
		t, _ := s.get(n.targets[0])
		ns, ok := t.(*namespace)
		if !ok {
			return &Error{Kind: "TemplateRuntimeError", Msg: "cannot assign attribute on non-namespace object"}
		}
		ns.attrs.Set(n.attr, v)
	case len(n.targets) == 1:
		s.vars[n.targets[0]] = v
	default:
		return unpack(n.targets, v, s)
	}
	return nil
}

func unpack(targets []string, v Value, s *scope) error {
	items, err := iterate(v)
	if err != nil {
		return err
	}
	if len(items) != len(targets) {
		return &Error{Kind: "ValueError", Msg: fmt.Sprintf("expected %d values to unpack, got %d", len(targets), len(items))}
	}
	for i, t := range targets {
		s.vars[t] = items[i]
	}
	return nil
}

// loop is the loop variable of a for loop.
type loop struct {
	index0, length int
	items          []Value
	depth0         int
	recurse        *function
}

func (l *loop) attr(name string) Value {
	switch name {
	case "index0":
		return int64(l.index0)
	case "index":
		return int64(l.index0 + 1)
	case "revindex0":
		return int64(l.length - l.index0 - 1)
	case "revindex":
		return int64(l.length - l.index0)
	case "first":
		return l.index0 == 0
	case "last":
		return l.index0 == l.length-1
	case "length":
		return int64(l.length)
	case "depth0":
		return int64(l.depth0)
	case "depth":
		return int64(l.depth0 + 1)
	case "previtem":
		if l.index0 > 0 {
			return l.items[l.index0-1]
		}
		return Undefined{Name: "previtem"}
	case "nextitem":
		if l.index0+1 < l.length {
			return l.items[l.index0+1]
		}
		return Undefined{Name: "nextitem"}
	case "cycle":
		return &function{name: "cycle", call: func(e *evaluator, pos []Value, kw *Dict) (Value, error) {
			if len(pos) == 0 {
				return nil, typeErr("no items for cycling given")
			}
			return pos[l.index0%len(pos)], nil
		}}
	}
	return Undefined{Name: "loop." + name}
}

func (e *evaluator) forLoop(n forN, s *scope) error {
	it, err := e.eval(n.iter, s)
	if err != nil {
		return err
	}
	return e.runLoop(n, it, s, 0)
}

func (e *evaluator) runLoop(n forN, it Value, s *scope, depth0 int) error {
	items, err := iterate(it)
	if err != nil {
		return err
	}
	if n.cond != nil {
		// The loop's "if" filters items before loop.index and loop.length are counted.
		var kept []Value
		for _, item := range items {
			is := newScope(s)
			if err := bind(n.targets, item, is); err != nil {
				return err
			}
			v, err := e.eval(n.cond, is)
			if err != nil {
				return err
			}
			if truthy(v) {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return e.nodes(n.els, s)
	}
	l := &loop{length: len(items), items: items, depth0: depth0}
	if n.recursive {
		l.recurse = &function{name: "loop", call: func(e *evaluator, pos []Value, kw *Dict) (Value, error) {
			if len(pos) != 1 {
				return nil, typeErr("loop() takes exactly one argument")
			}
			if e.depth++; e.depth > maxCallDepth {
				return nil, fmt.Errorf("%w: recursive loop deeper than %d", ErrLimit, maxCallDepth)
			}
			defer func() { e.depth-- }()
			return e.captureLoop(n, pos[0], s, depth0+1)
		}}
	}
	for i, item := range items {
		l.index0 = i
		is := newScope(s)
		is.vars["loop"] = l
		if err := bind(n.targets, item, is); err != nil {
			return err
		}
		err := e.nodes(n.body, is)
		switch {
		case errors.Is(err, errBreak):
			return nil
		case errors.Is(err, errContinue):
		case err != nil:
			return err
		}
	}
	return nil
}

func (e *evaluator) captureLoop(n forN, it Value, s *scope, depth0 int) (Value, error) {
	saved := e.out
	var b strings.Builder
	e.out = &b
	err := e.runLoop(n, it, s, depth0)
	e.out = saved
	return b.String(), err
}

func bind(targets []string, item Value, s *scope) error {
	if len(targets) == 1 {
		s.vars[targets[0]] = item
		return nil
	}
	return unpack(targets, item, s)
}

// iterate lists what a for loop visits: list items, dict keys, string characters; undefined
// is empty.
func iterate(v Value) ([]Value, error) {
	switch v := v.(type) {
	case []Value:
		return v, nil
	case Tuple:
		return v, nil
	case *Dict:
		out := make([]Value, len(v.keys))
		for i, k := range v.keys {
			out[i] = k
		}
		return out, nil
	case string:
		var out []Value
		for _, r := range v {
			out = append(out, string(r))
		}
		return out, nil
	case Undefined:
		return nil, nil
	case *namespace:
		return iterate(v.attrs)
	}
	return nil, typeErr("'%s' object is not iterable", typeName(v))
}

func (e *evaluator) macro(n macroN, def *scope) *function {
	return &function{name: n.name, call: func(e *evaluator, pos []Value, kw *Dict) (Value, error) {
		if e.depth++; e.depth > maxCallDepth {
			return nil, fmt.Errorf("%w: macro calls nest deeper than %d", ErrLimit, maxCallDepth)
		}
		defer func() { e.depth-- }()
		ms := newScope(def)
		var extra []Value
		for i, p := range n.params {
			switch {
			case i < len(pos):
				ms.vars[p] = pos[i]
			case kw != nil && hasKey(kw, p):
				ms.vars[p], _ = kw.Get(p)
			case n.defaults[i] != nil:
				v, err := e.eval(n.defaults[i], ms)
				if err != nil {
					return nil, err
				}
				ms.vars[p] = v
			default:
				ms.vars[p] = Undefined{Name: p}
			}
		}
		if len(pos) > len(n.params) {
			extra = pos[len(n.params):]
		}
		ms.vars["varargs"] = append([]Value{}, extra...)
		kwargs := NewDict()
		if kw != nil {
			for _, k := range kw.keys {
				if !contains(n.params, k) {
					kwargs.Set(k, kw.m[k])
				}
			}
		}
		ms.vars["kwargs"] = kwargs
		if c, ok := def.get("caller"); ok {
			ms.vars["caller"] = c
		}
		line := e.line
		v, err := e.capture(n.body, ms)
		e.line = line
		return v, err
	}}
}

func hasKey(d *Dict, k string) bool { _, ok := d.m[k]; return ok }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
