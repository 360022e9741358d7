package jinja

import (
	"fmt"
	"strconv"
	"strings"
)

// Expressions.
type (
	expr  interface{}
	litE  struct{ v Value }
	nameE struct{ name string }
	attrE struct {
		x    expr
		name string
	}
	itemE struct{ x, key expr }
	// sliceE is x[lo:hi:step]; missing parts are nil.
	sliceE struct{ x, lo, hi, step expr }
	callE  struct {
		fn expr
		args
	}
	// filterE applies a filter to x (nil inside a filter block, where the body is the input).
	filterE struct {
		x    expr
		name string
		args
	}
	testE struct {
		x    expr
		name string
		neg  bool
		args
	}
	unaryE struct {
		op string
		x  expr
	}
	binE struct {
		op   string
		a, b expr
	}
	// condE is "a if cond else b"; b may be nil (undefined).
	condE struct{ cond, a, b expr }
	listE struct {
		items []expr
		tuple bool
	}
	dictE struct{ keys, vals []expr }
)

// args are a call's positional and keyword arguments.
type args struct {
	pos     []expr
	kwNames []string
	kwVals  []expr
}

// Statements.
type (
	node  interface{}
	textN struct{ s string }
	outN  struct {
		x    expr
		line int
	}
	ifN struct {
		conds  []expr
		bodies [][]node
		els    []node
		line   int
	}
	forN struct {
		targets   []string
		iter      expr
		cond      expr // the loop's "if" filter, or nil
		body, els []node
		recursive bool
		line      int
	}
	setN struct {
		targets []string // one name, several for unpacking
		attr    string   // {% set ns.attr = … %}: targets[0] is the namespace
		x       expr
		line    int
	}
	setBlockN struct {
		name    string
		filters []filterE
		body    []node
		line    int
	}
	macroN struct {
		name     string
		params   []string
		defaults []expr // per parameter, nil when it has none
		body     []node
		line     int
	}
	callBlockN struct {
		call   callE
		params []string
		body   []node
		line   int
	}
	filterBlockN struct {
		filters []filterE
		body    []node
		line    int
	}
	breakN    struct{ line int }
	continueN struct{ line int }
)

// maxNesting bounds how deep expressions and blocks nest, so that a hostile template cannot
// exhaust the parser's stack.
const maxNesting = 200

type parser struct {
	pieces []piece
	at     int // next piece

	toks  []token
	pos   int
	line  int
	depth int
}

func parse(src string) ([]node, error) {
	pieces, err := cut(src)
	if err != nil {
		return nil, err
	}
	p := &parser{pieces: pieces}
	body, end, err := p.block()
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errorf("unexpected '%s'", end)
	}
	return body, nil
}

func (p *parser) errorf(format string, a ...any) error {
	return &Error{Kind: "TemplateSyntaxError", Line: p.line, Msg: fmt.Sprintf(format, a...)}
}

// endTags are the statements that close or divide a block; block returns at the first one.
var endTags = map[string]bool{
	"endif": true, "elif": true, "else": true, "endfor": true, "endmacro": true, "endset": true,
	"endcall": true, "endfilter": true, "endgeneration": true,
}

// block parses nodes up to an end tag, which it returns with its tokens left to read.
func (p *parser) block() ([]node, string, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxNesting {
		return nil, "", p.errorf("blocks nest deeper than %d", maxNesting)
	}
	var out []node
	for p.at < len(p.pieces) {
		pc := p.pieces[p.at]
		p.at++
		p.toks, p.pos, p.line = pc.toks, 0, pc.line
		switch pc.kind {
		case pieceText:
			out = append(out, textN{pc.text})
		case pieceExpr:
			x, err := p.expr()
			if err != nil {
				return nil, "", err
			}
			if err := p.end(); err != nil {
				return nil, "", err
			}
			out = append(out, outN{x, pc.line})
		case pieceStmt:
			if len(pc.toks) == 0 || pc.toks[0].kind != tokName {
				return nil, "", p.errorf("expected a statement name")
			}
			name := pc.toks[0].s
			if endTags[name] {
				p.pos = 1
				return out, name, nil
			}
			p.pos = 1
			n, err := p.statement(name)
			if err != nil {
				return nil, "", err
			}
			if n != nil {
				out = append(out, n)
			}
		}
	}
	return out, "", nil
}

// expectEnd parses a block that must close with one of want.
func (p *parser) expectEnd(what string, want ...string) ([]node, string, error) {
	line := p.line
	body, end, err := p.block()
	if err != nil {
		return nil, "", err
	}
	for _, w := range want {
		if end == w {
			return body, end, nil
		}
	}
	if end == "" {
		p.line = line
		return nil, "", p.errorf("'%s' is not closed (expected '%s')", what, strings.Join(want, "' or '"))
	}
	return nil, "", p.errorf("unexpected '%s' in '%s' (expected '%s')", end, what, strings.Join(want, "' or '"))
}

func (p *parser) statement(name string) (node, error) {
	line := p.line
	switch name {
	case "if":
		n := ifN{line: line}
		cond, err := p.exprEnd()
		if err != nil {
			return nil, err
		}
		for {
			body, end, err := p.expectEnd("if", "elif", "else", "endif")
			if err != nil {
				return nil, err
			}
			n.conds, n.bodies = append(n.conds, cond), append(n.bodies, body)
			switch end {
			case "elif":
				if cond, err = p.exprEnd(); err != nil {
					return nil, err
				}
				continue
			case "else":
				if err := p.end(); err != nil {
					return nil, err
				}
				if n.els, _, err = p.expectEnd("if", "endif"); err != nil {
					return nil, err
				}
			}
			return n, p.end()
		}
	case "for":
		n := forN{line: line}
		for {
			t, err := p.name()
			if err != nil {
				return nil, err
			}
			n.targets = append(n.targets, t)
			if !p.op(",") {
				break
			}
		}
		if !p.keyword("in") {
			return nil, p.errorf("expected 'in' in 'for'")
		}
		var err error
		if n.iter, err = p.noCond(); err != nil {
			return nil, err
		}
		if p.keyword("if") {
			if n.cond, err = p.noCond(); err != nil {
				return nil, err
			}
		}
		n.recursive = p.keyword("recursive")
		if err := p.end(); err != nil {
			return nil, err
		}
		body, end, err := p.expectEnd("for", "else", "endfor")
		if err != nil {
			return nil, err
		}
		n.body = body
		if end == "else" {
			if err := p.end(); err != nil {
				return nil, err
			}
			if n.els, _, err = p.expectEnd("for", "endfor"); err != nil {
				return nil, err
			}
		}
		return n, p.end()
	case "set":
		n := setN{line: line}
		t, err := p.name()
		if err != nil {
			return nil, err
		}
		n.targets = []string{t}
		switch {
		case p.op("."):
			if n.attr, err = p.name(); err != nil {
				return nil, err
			}
		case p.peekOp(","):
			for p.op(",") {
				t, err := p.name()
				if err != nil {
					return nil, err
				}
				n.targets = append(n.targets, t)
			}
		}
		if !p.op("=") {
			if len(n.targets) > 1 || n.attr != "" {
				return nil, p.errorf("expected '=' in 'set'")
			}
			// {% set name %}…{% endset %}, optionally filtered.
			b := setBlockN{name: t, line: line}
			for p.op("|") {
				f, err := p.filterCall(nil)
				if err != nil {
					return nil, err
				}
				b.filters = append(b.filters, f)
			}
			if err := p.end(); err != nil {
				return nil, err
			}
			if b.body, _, err = p.expectEnd("set", "endset"); err != nil {
				return nil, err
			}
			return b, p.end()
		}
		if n.x, err = p.tupleOrExpr(); err != nil {
			return nil, err
		}
		return n, p.end()
	case "macro":
		n := macroN{line: line}
		var err error
		if n.name, err = p.name(); err != nil {
			return nil, err
		}
		if !p.op("(") {
			return nil, p.errorf("expected '(' after macro name")
		}
		err = p.items(")", "macro parameters", func() error {
			name, err := p.name()
			if err != nil {
				return err
			}
			var def expr
			if p.op("=") {
				def, err = p.expr()
			}
			n.params, n.defaults = append(n.params, name), append(n.defaults, def)
			return err
		})
		if err != nil {
			return nil, err
		}
		if err := p.end(); err != nil {
			return nil, err
		}
		if n.body, _, err = p.expectEnd("macro", "endmacro"); err != nil {
			return nil, err
		}
		return n, p.end()
	case "call":
		n := callBlockN{line: line}
		if p.op("(") {
			err := p.items(")", "call parameters", func() error {
				name, err := p.name()
				n.params = append(n.params, name)
				return err
			})
			if err != nil {
				return nil, err
			}
		}
		x, err := p.expr()
		if err != nil {
			return nil, err
		}
		c, ok := x.(callE)
		if !ok {
			return nil, p.errorf("expected a macro call after 'call'")
		}
		n.call = c
		if err := p.end(); err != nil {
			return nil, err
		}
		if n.body, _, err = p.expectEnd("call", "endcall"); err != nil {
			return nil, err
		}
		return n, p.end()
	case "filter":
		n := filterBlockN{line: line}
		for {
			f, err := p.filterCall(nil)
			if err != nil {
				return nil, err
			}
			n.filters = append(n.filters, f)
			if !p.op("|") {
				break
			}
		}
		if err := p.end(); err != nil {
			return nil, err
		}
		var err error
		if n.body, _, err = p.expectEnd("filter", "endfilter"); err != nil {
			return nil, err
		}
		return n, p.end()
	case "generation":
		// transformers' {% generation %} marks the assistant's part for training masks;
		// rendering prints its body.
		if err := p.end(); err != nil {
			return nil, err
		}
		body, _, err := p.expectEnd("generation", "endgeneration")
		if err != nil {
			return nil, err
		}
		return filterBlockN{body: body, line: line}, p.end()
	case "break":
		return breakN{line}, p.end()
	case "continue":
		return continueN{line}, p.end()
	case "do":
		x, err := p.exprEnd()
		if err != nil {
			return nil, err
		}
		return setN{x: x, line: line}, nil
	}
	return nil, p.errorf("unknown statement '%s'", name)
}

// Token helpers.

func (p *parser) peek() (token, bool) {
	if p.pos < len(p.toks) {
		return p.toks[p.pos], true
	}
	return token{}, false
}

func (p *parser) peekOp(op string) bool {
	t, ok := p.peek()
	return ok && t.kind == tokOp && t.s == op
}

func (p *parser) op(op string) bool {
	if p.peekOp(op) {
		p.pos++
		return true
	}
	return false
}

func (p *parser) peekKeyword(kw string) bool {
	t, ok := p.peek()
	return ok && t.kind == tokName && t.s == kw
}

func (p *parser) keyword(kw string) bool {
	if p.peekKeyword(kw) {
		p.pos++
		return true
	}
	return false
}

func (p *parser) name() (string, error) {
	t, ok := p.peek()
	if !ok || t.kind != tokName {
		return "", p.errorf("expected a name, got %s", p.describe())
	}
	p.pos++
	return t.s, nil
}

func (p *parser) describe() string {
	if t, ok := p.peek(); ok {
		return "'" + t.String() + "'"
	}
	return "the end of the tag"
}

func (p *parser) end() error {
	if p.pos < len(p.toks) {
		return p.errorf("unexpected %s", p.describe())
	}
	return nil
}

func (p *parser) exprEnd() (expr, error) {
	x, err := p.expr()
	if err != nil {
		return nil, err
	}
	return x, p.end()
}

// Expressions, by precedence from lowest: conditional, or, and, not, comparison (in, not in,
// ==, …), ~, + -, * / // %, unary - +, **, then filters, tests and postfix operators.

func (p *parser) nest() error {
	p.depth++
	if p.depth > maxNesting {
		return p.errorf("expression nests deeper than %d", maxNesting)
	}
	return nil
}

func (p *parser) expr() (expr, error) {
	if err := p.nest(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	x, err := p.or()
	if err != nil {
		return nil, err
	}
	for p.keyword("if") {
		c := condE{a: x}
		if c.cond, err = p.or(); err != nil {
			return nil, err
		}
		if p.keyword("else") {
			if c.b, err = p.expr(); err != nil {
				return nil, err
			}
		}
		x = c
	}
	return x, nil
}

// noCond is an expression without a trailing "if" (a for loop's iterable).
func (p *parser) noCond() (expr, error) { return p.or() }

// tupleOrExpr reads "a, b" as a tuple (set statements).
func (p *parser) tupleOrExpr() (expr, error) {
	x, err := p.expr()
	if err != nil || !p.peekOp(",") {
		return x, err
	}
	l := listE{items: []expr{x}, tuple: true}
	for p.op(",") {
		if _, ok := p.peek(); !ok {
			break
		}
		y, err := p.expr()
		if err != nil {
			return nil, err
		}
		l.items = append(l.items, y)
	}
	return l, nil
}

func (p *parser) or() (expr, error)  { return p.binary(p.and, "or") }
func (p *parser) and() (expr, error) { return p.binary(p.not, "and") }

func (p *parser) not() (expr, error) {
	if p.keyword("not") {
		if err := p.nest(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		x, err := p.not()
		return unaryE{"not", x}, err
	}
	return p.compare()
}

func (p *parser) compare() (expr, error) {
	return p.binary(p.concat, "==", "!=", "<", ">", "<=", ">=", "in", "not in")
}
func (p *parser) concat() (expr, error)  { return p.binary(p.sum, "~") }
func (p *parser) sum() (expr, error)     { return p.binary(p.product, "+", "-") }
func (p *parser) product() (expr, error) { return p.binary(p.power, "*", "//", "/", "%") }

// binary reads operand (op operand)… for the operators of one precedence level, left to
// right.
func (p *parser) binary(operand func() (expr, error), ops ...string) (expr, error) {
	x, err := operand()
	for err == nil {
		op := p.binaryOp(ops)
		if op == "" {
			break
		}
		var y expr
		if y, err = operand(); err == nil {
			x = binE{op, x, y}
		}
	}
	return x, err
}

// binaryOp reads one of ops, returning it, or "" (reading nothing).
func (p *parser) binaryOp(ops []string) string {
	for _, op := range ops {
		switch op {
		case "and", "or", "in":
			if p.keyword(op) {
				return op
			}
		case "not in":
			if p.peekKeyword("not") && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tokName && p.toks[p.pos+1].s == "in" {
				p.pos += 2
				return op
			}
		default:
			if p.op(op) {
				return op
			}
		}
	}
	return ""
}

func (p *parser) power() (expr, error) {
	return p.binary(func() (expr, error) { return p.unary(true) }, "**")
}

// unary reads "-x" and "+x", then filters and tests when withFilters (jinja2 applies them to
// the negated value: -x|abs is abs(-x)).
func (p *parser) unary(withFilters bool) (expr, error) {
	var x expr
	var err error
	switch {
	case p.peekOp("-") || p.peekOp("+"):
		op := p.toks[p.pos].s
		p.pos++
		if err := p.nest(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		var y expr
		if y, err = p.unary(false); err != nil {
			return nil, err
		}
		x = unaryE{op, y}
	default:
		if x, err = p.postfix(); err != nil {
			return nil, err
		}
	}
	if withFilters {
		return p.filters(x)
	}
	return x, nil
}

// filters reads "| filter(args)" and "is [not] test(args)" after x.
func (p *parser) filters(x expr) (expr, error) {
	for {
		switch {
		case p.op("|"):
			f, err := p.filterCall(x)
			if err != nil {
				return nil, err
			}
			x = f
		case p.keyword("is"):
			t := testE{x: x, neg: p.keyword("not")}
			var err error
			if t.name, err = p.dottedName(); err != nil {
				return nil, err
			}
			switch tok, ok := p.peek(); {
			case ok && tok.kind == tokOp && tok.s == "(":
				p.pos++
				if t.args, err = p.callArgs(); err != nil {
					return nil, err
				}
			case ok && (tok.kind == tokString || tok.kind == tokInt || tok.kind == tokFloat ||
				tok.kind == tokName && tok.s != "and" && tok.s != "or" && tok.s != "else" && tok.s != "if" && tok.s != "is" && tok.s != "in" && tok.s != "not"):
				// A test takes one argument without parentheses: "x is divisibleby 3".
				arg, err := p.postfix()
				if err != nil {
					return nil, err
				}
				t.pos = []expr{arg}
			}
			x = t
		default:
			return x, nil
		}
	}
}

func (p *parser) dottedName() (string, error) {
	name, err := p.name()
	for err == nil && p.op(".") {
		var more string
		more, err = p.name()
		name += "." + more
	}
	return name, err
}

func (p *parser) filterCall(x expr) (filterE, error) {
	f := filterE{x: x}
	var err error
	if f.name, err = p.dottedName(); err != nil {
		return f, err
	}
	if p.op("(") {
		if f.args, err = p.callArgs(); err != nil {
			return f, err
		}
	}
	return f, nil
}

// items reads comma-separated items up to close (a trailing comma allowed), the opening
// bracket already read; item reads one.
func (p *parser) items(close, what string, item func() error) error {
	for n := 0; !p.op(close); n++ {
		if n > 0 && !p.op(",") {
			return p.errorf("expected ',' or '%s' in %s, got %s", close, what, p.describe())
		}
		if p.op(close) {
			break
		}
		if err := item(); err != nil {
			return err
		}
	}
	return nil
}

// callArgs reads arguments up to the closing parenthesis (the opening one is read).
func (p *parser) callArgs() (args, error) {
	var a args
	err := p.items(")", "arguments", func() error {
		if t, ok := p.peek(); ok && t.kind == tokName && p.pos+1 < len(p.toks) && p.toks[p.pos+1].kind == tokOp && p.toks[p.pos+1].s == "=" {
			p.pos += 2
			v, err := p.expr()
			a.kwNames, a.kwVals = append(a.kwNames, t.s), append(a.kwVals, v)
			return err
		}
		if len(a.kwNames) > 0 {
			return p.errorf("positional argument follows keyword argument")
		}
		v, err := p.expr()
		a.pos = append(a.pos, v)
		return err
	})
	return a, err
}

func (p *parser) postfix() (expr, error) {
	x, err := p.primary()
	for err == nil {
		switch {
		case p.op("."):
			t, ok := p.peek()
			if ok && t.kind == tokInt {
				p.pos++
				n, _ := strconv.ParseInt(t.s, 10, 64)
				x = itemE{x, litE{n}}
				continue
			}
			var name string
			if name, err = p.name(); err == nil {
				x = attrE{x, name}
			}
		case p.op("["):
			x, err = p.subscript(x)
		case p.op("("):
			var a args
			if a, err = p.callArgs(); err == nil {
				x = callE{x, a}
			}
		default:
			return x, nil
		}
	}
	return x, err
}

func (p *parser) subscript(x expr) (expr, error) {
	var parts [3]expr
	n := 0
	for {
		if n < 3 && !p.peekOp(":") && !p.peekOp("]") {
			v, err := p.expr()
			if err != nil {
				return nil, err
			}
			parts[n] = v
		}
		if p.op("]") {
			break
		}
		if !p.op(":") || n == 2 {
			return nil, p.errorf("expected ']' in subscript, got %s", p.describe())
		}
		n++
	}
	if n == 0 {
		return itemE{x, parts[0]}, nil
	}
	return sliceE{x, parts[0], parts[1], parts[2]}, nil
}

func (p *parser) primary() (expr, error) {
	if err := p.nest(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	t, ok := p.peek()
	if !ok {
		return nil, p.errorf("expected an expression, got the end of the tag")
	}
	p.pos++
	switch t.kind {
	case tokString:
		s := t.s
		// Adjacent literals concatenate, as in Python.
		for nt, ok := p.peek(); ok && nt.kind == tokString; nt, ok = p.peek() {
			s += nt.s
			p.pos++
		}
		return litE{s}, nil
	case tokInt:
		n, err := strconv.ParseInt(t.s, 10, 64)
		if err != nil {
			f, _ := strconv.ParseFloat(t.s, 64)
			return litE{f}, nil
		}
		return litE{n}, nil
	case tokFloat:
		f, err := strconv.ParseFloat(t.s, 64)
		if err != nil {
			return nil, p.errorf("bad number %s", t.s)
		}
		return litE{f}, nil
	case tokName:
		switch t.s {
		case "true", "True":
			return litE{true}, nil
		case "false", "False":
			return litE{false}, nil
		case "none", "None":
			return litE{nil}, nil
		}
		return nameE{t.s}, nil
	}
	switch t.s {
	case "(":
		if p.op(")") {
			return listE{tuple: true}, nil
		}
		x, err := p.expr()
		if err != nil {
			return nil, err
		}
		if p.peekOp(",") {
			l := listE{items: []expr{x}, tuple: true}
			for p.op(",") && !p.peekOp(")") {
				y, err := p.expr()
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, y)
			}
			x = l
		}
		if !p.op(")") {
			return nil, p.errorf("expected ')', got %s", p.describe())
		}
		return x, nil
	case "[":
		var l listE
		err := p.items("]", "list", func() error {
			y, err := p.expr()
			l.items = append(l.items, y)
			return err
		})
		return l, err
	case "{":
		var d dictE
		err := p.items("}", "dict", func() error {
			k, err := p.expr()
			if err != nil {
				return err
			}
			if !p.op(":") {
				return p.errorf("expected ':' in dict, got %s", p.describe())
			}
			v, err := p.expr()
			d.keys, d.vals = append(d.keys, k), append(d.vals, v)
			return err
		})
		return d, err
	}
	return nil, p.errorf("unexpected '%s'", t.s)
}
