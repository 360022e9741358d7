package grammar

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// A Program is a compiled grammar: rules of alternatives, each alternative a run of
// elements in one array ending with an end element. An element matches one byte of a set
// or refers to a rule. It is immutable and may be shared by any number of Matchers.
type Program struct {
	elems []elem
	sets  []byteSet
	rules [][]int32 // per rule, the start of each alternative in elems
	names []string  // per rule, for errors
	root  int32

	mu       sync.Mutex
	automata map[*Vocab]*automaton // what the matchers over each vocabulary share
}

type elemKind uint8

const (
	kindEnd elemKind = iota
	kindBytes
	kindRef
)

type elem struct {
	kind elemKind
	arg  int32 // kindBytes: index in sets; kindRef: rule
}

type byteSet [4]uint64

func (s *byteSet) add(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		s[b>>6] |= 1 << (b & 63)
	}
}

func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }

// ErrGrammar is wrapped by every error about a grammar's content.
var ErrGrammar = errors.New("grammar")

// compiler lowers a Grammar's expressions to a Program.
type compiler struct {
	g       *Grammar
	p       *Program
	named   map[string]int32
	setIdx  map[byteSet]int32
	classes map[string]int32 // anonymous rule per multi-byte class
	anon    int
}

// Compile checks g and builds its Program.
func Compile(g *Grammar) (*Program, error) {
	if _, ok := g.Rules[g.Root]; !ok {
		return nil, fmt.Errorf("%w: no root rule %q", ErrGrammar, g.Root)
	}
	c := &compiler{g: g, p: &Program{}, named: map[string]int32{}, setIdx: map[byteSet]int32{}, classes: map[string]int32{}}
	names := make([]string, 0, len(g.Rules))
	for n := range g.Rules {
		names = append(names, n)
	}
	slices.Sort(names) // deterministic rule numbers
	for _, n := range names {
		c.named[n] = c.newRule(n)
	}
	for _, n := range names {
		if err := c.defineRule(c.named[n], g.Rules[n]); err != nil {
			return nil, err
		}
	}
	c.p.root = c.named[g.Root]
	if err := c.p.checkLeftRecursion(); err != nil {
		return nil, err
	}
	return c.p, nil
}

// MustCompile is Compile for grammars known to be good (built in code); it panics on error.
func MustCompile(g *Grammar) *Program {
	p, err := Compile(g)
	if err != nil {
		panic(err)
	}
	return p
}

func (c *compiler) newRule(name string) int32 {
	c.p.rules = append(c.p.rules, nil)
	c.p.names = append(c.p.names, name)
	return int32(len(c.p.rules) - 1)
}

func (c *compiler) anonRule(hint string) int32 {
	c.anon++
	return c.newRule(fmt.Sprintf("%s#%d", hint, c.anon))
}

// defineRule sets rule r to the alternatives of e.
func (c *compiler) defineRule(r int32, e Expr) error {
	var alts []Expr
	if a, ok := e.(Alt); ok {
		alts = a
	} else {
		alts = []Expr{e}
	}
	for _, a := range alts {
		var items []elem
		items, err := c.seq(items, a, c.p.names[r])
		if err != nil {
			return err
		}
		if len(c.p.elems)+len(items)+1 > MaxElements {
			return fmt.Errorf("%w: the grammar compiles to more than %d elements", ErrGrammar, MaxElements)
		}
		c.p.rules[r] = append(c.p.rules[r], int32(len(c.p.elems)))
		c.p.elems = append(c.p.elems, items...)
		c.p.elems = append(c.p.elems, elem{kind: kindEnd})
	}
	return nil
}

func (c *compiler) set(s byteSet) elem {
	i, ok := c.setIdx[s]
	if !ok {
		i = int32(len(c.p.sets))
		c.p.sets = append(c.p.sets, s)
		c.setIdx[s] = i
	}
	return elem{kind: kindBytes, arg: i}
}

// seq appends the elements matching e to items. Choices and repetitions inside a sequence
// become anonymous rules.
func (c *compiler) seq(items []elem, e Expr, hint string) ([]elem, error) {
	if len(items) > MaxElements {
		return nil, fmt.Errorf("%w: the grammar compiles to more than %d elements", ErrGrammar, MaxElements)
	}
	switch e := e.(type) {
	case Seq:
		var err error
		for _, x := range e {
			if items, err = c.seq(items, x, hint); err != nil {
				return nil, err
			}
		}
		return items, nil
	case Lit:
		for i := 0; i < len(e); i++ {
			var s byteSet
			s.add(e[i], e[i])
			items = append(items, c.set(s))
		}
		return items, nil
	case Ref:
		r, ok := c.named[string(e)]
		if !ok {
			return nil, fmt.Errorf("%w: rule %s refers to undefined rule %q", ErrGrammar, hint, string(e))
		}
		return append(items, elem{kind: kindRef, arg: r}), nil
	case Alt:
		if len(e) == 1 {
			return c.seq(items, e[0], hint)
		}
		r := c.anonRule(hint)
		if err := c.defineRule(r, e); err != nil {
			return nil, err
		}
		return append(items, elem{kind: kindRef, arg: r}), nil
	case Class:
		return c.class(items, e, hint)
	case Rep:
		return c.rep(items, e, hint)
	case nil:
		return nil, fmt.Errorf("%w: rule %s has an empty expression", ErrGrammar, hint)
	}
	return nil, fmt.Errorf("%w: rule %s: unknown expression %T", ErrGrammar, hint, e)
}

func (c *compiler) rep(items []elem, e Rep, hint string) ([]elem, error) {
	if e.Min < 0 || e.Min > MaxRepeat || e.Max > MaxRepeat || (e.Max >= 0 && e.Max < e.Min) {
		return nil, fmt.Errorf("%w: rule %s: repetition {%d,%d} is outside 0 ≤ min ≤ max ≤ %d", ErrGrammar, hint, e.Min, e.Max, MaxRepeat)
	}
	// The mandatory copies go inline; X itself becomes a rule when it is more than one
	// element, so that every copy refers to it.
	x, err := c.seq(nil, e.X, hint)
	if err != nil {
		return nil, err
	}
	if len(x) != 1 {
		r := c.anonRule(hint)
		if err := c.defineRule(r, e.X); err != nil {
			return nil, err
		}
		x = []elem{{kind: kindRef, arg: r}}
	}
	for range e.Min {
		items = append(items, x[0])
	}
	switch {
	case e.Max < 0: // star ::= x star | ε (a tail call: the stack does not grow)
		r := c.anonRule(hint)
		c.p.rules[r] = []int32{int32(len(c.p.elems)), int32(len(c.p.elems) + 3)}
		c.p.elems = append(c.p.elems, x[0], elem{kind: kindRef, arg: r}, elem{kind: kindEnd}, elem{kind: kindEnd})
		items = append(items, elem{kind: kindRef, arg: r})
	case e.Max > e.Min: // opt_k ::= x opt_{k-1} | ε, opt_1 ::= x | ε
		next := int32(-1)
		for range e.Max - e.Min {
			r := c.anonRule(hint)
			start := int32(len(c.p.elems))
			c.p.elems = append(c.p.elems, x[0])
			if next >= 0 {
				c.p.elems = append(c.p.elems, elem{kind: kindRef, arg: next})
			}
			c.p.elems = append(c.p.elems, elem{kind: kindEnd}, elem{kind: kindEnd})
			c.p.rules[r] = []int32{start, int32(len(c.p.elems) - 1)}
			next = r
		}
		items = append(items, elem{kind: kindRef, arg: next})
	}
	if len(c.p.elems) > MaxElements {
		return nil, fmt.Errorf("%w: the grammar compiles to more than %d elements", ErrGrammar, MaxElements)
	}
	return items, nil
}

// class appends one byte set for a class of single-byte characters, else a reference to a
// rule whose alternatives are the class's UTF-8 byte sequences.
func (c *compiler) class(items []elem, e Class, hint string) ([]elem, error) {
	ranges := normalize(e)
	if len(ranges) == 0 {
		return nil, fmt.Errorf("%w: rule %s has a character class that matches nothing", ErrGrammar, hint)
	}
	var seqs [][]byteRange
	for _, r := range ranges {
		seqs = utf8Sequences(seqs, r.Lo, r.Hi)
	}
	if ranges[len(ranges)-1].Hi < utf8.RuneSelf {
		var s byteSet
		for _, q := range seqs {
			s.add(q[0].lo, q[0].hi)
		}
		return append(items, c.set(s)), nil
	}
	key := fmt.Sprint(ranges)
	r, ok := c.classes[key]
	if !ok {
		r = c.anonRule(hint)
		c.classes[key] = r
		for _, q := range seqs {
			c.p.rules[r] = append(c.p.rules[r], int32(len(c.p.elems)))
			for _, br := range q {
				var s byteSet
				s.add(br.lo, br.hi)
				c.p.elems = append(c.p.elems, c.set(s))
			}
			c.p.elems = append(c.p.elems, elem{kind: kindEnd})
		}
	}
	return append(items, elem{kind: kindRef, arg: r}), nil
}

// normalize returns the code points a class matches as sorted, disjoint ranges inside
// [0, MaxRune], surrogates excluded.
func normalize(e Class) []Range {
	var rs []Range
	for _, r := range e.Ranges {
		lo, hi := max(r.Lo, 0), min(r.Hi, utf8.MaxRune)
		if lo <= hi {
			rs = append(rs, Range{lo, hi})
		}
	}
	slices.SortFunc(rs, func(a, b Range) int { return int(a.Lo - b.Lo) })
	var merged []Range
	for _, r := range rs {
		if n := len(merged); n > 0 && r.Lo <= merged[n-1].Hi+1 {
			merged[n-1].Hi = max(merged[n-1].Hi, r.Hi)
			continue
		}
		merged = append(merged, r)
	}
	if e.Neg {
		var inv []Range
		next := rune(0)
		for _, r := range merged {
			if r.Lo > next {
				inv = append(inv, Range{next, r.Lo - 1})
			}
			next = r.Hi + 1
		}
		if next <= utf8.MaxRune {
			inv = append(inv, Range{next, utf8.MaxRune})
		}
		merged = inv
	}
	var out []Range // without surrogates, which UTF-8 cannot encode
	for _, r := range merged {
		if r.Lo < 0xD800 && r.Hi > 0xDFFF {
			out = append(out, Range{r.Lo, 0xD7FF}, Range{0xE000, r.Hi})
			continue
		}
		if r.Lo >= 0xD800 && r.Lo <= 0xDFFF {
			r.Lo = 0xE000
		}
		if r.Hi >= 0xD800 && r.Hi <= 0xDFFF {
			r.Hi = 0xD7FF
		}
		if r.Lo <= r.Hi {
			out = append(out, r)
		}
	}
	return out
}

type byteRange struct{ lo, hi byte }

// utf8Sequences appends the byte-range sequences whose concatenations are exactly the UTF-8
// encodings of [lo, hi] (no surrogates inside). The range is split where the encoded length
// changes, then where a continuation byte would not cover its full 0x80–0xBF span, so that
// each piece is a product of byte ranges.
func utf8Sequences(out [][]byteRange, lo, hi rune) [][]byteRange {
	if lo > hi {
		return out
	}
	for _, m := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= m && hi > m {
			out = utf8Sequences(out, lo, m)
			return utf8Sequences(out, m+1, hi)
		}
	}
	if hi < utf8.RuneSelf {
		return append(out, []byteRange{{byte(lo), byte(hi)}})
	}
	for i := uint(1); i < 4; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				out = utf8Sequences(out, lo, lo|m)
				return utf8Sequences(out, (lo|m)+1, hi)
			}
			if hi&m != m {
				out = utf8Sequences(out, lo, (hi&^m)-1)
				return utf8Sequences(out, hi&^m, hi)
			}
		}
	}
	var a, b [utf8.UTFMax]byte
	n := utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	seq := make([]byteRange, n)
	for i := range n {
		seq[i] = byteRange{a[i], b[i]}
	}
	return append(out, seq)
}

// checkLeftRecursion refuses a rule that can reach itself before matching a byte: the
// matcher expands references eagerly and would never stop.
func (p *Program) checkLeftRecursion() error {
	nullable := make([]bool, len(p.rules))
	for changed := true; changed; {
		changed = false
		for r, alts := range p.rules {
			if nullable[r] {
				continue
			}
			for _, a := range alts {
				if p.nullablePrefix(a, nullable) < 0 {
					nullable[r], changed = true, true
					break
				}
			}
		}
	}
	// edges[r]: rules that r can start with.
	edges := make([][]int32, len(p.rules))
	for r, alts := range p.rules {
		for _, a := range alts {
			for i := a; p.elems[i].kind != kindEnd; i++ {
				e := p.elems[i]
				if e.kind == kindBytes {
					break
				}
				edges[r] = append(edges[r], e.arg)
				if !nullable[e.arg] {
					break
				}
			}
		}
	}
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(p.rules))
	var path []int32
	var visit func(r int32) error
	visit = func(r int32) error {
		color[r] = grey
		path = append(path, r)
		for _, s := range edges[r] {
			switch color[s] {
			case grey:
				i := slices.Index(path, s)
				var cycle []string
				for _, q := range path[i:] {
					cycle = append(cycle, p.names[q])
				}
				cycle = append(cycle, p.names[s])
				return fmt.Errorf("%w: rule %s is left-recursive (%s); write the recursion after a terminal (a repetition of what can be empty, like (a*)*, is one too)", ErrGrammar, p.names[s], strings.Join(cycle, " → "))
			case white:
				if err := visit(s); err != nil {
					return err
				}
			}
		}
		path = path[:len(path)-1]
		color[r] = black
		return nil
	}
	for r := range p.rules {
		if color[r] == white {
			if err := visit(int32(r)); err != nil {
				return err
			}
		}
	}
	return nil
}

// nullablePrefix returns -1 if the alternative at a can match the empty string.
func (p *Program) nullablePrefix(a int32, nullable []bool) int32 {
	for i := a; ; i++ {
		switch e := p.elems[i]; e.kind {
		case kindEnd:
			return -1
		case kindBytes:
			return i
		case kindRef:
			if !nullable[e.arg] {
				return i
			}
		}
	}
}
