package grammar

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func mustParse(t *testing.T, src string) *Program {
	t.Helper()
	p, err := ParseProgram(src)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGBNF(t *testing.T) {
	p := mustParse(t, `
root ::= "{" pair ("," pair)* "}"   # objects of small numbers
pair ::= name ":" num
name ::= "\"" [a-z_]{1,4} "\""
num  ::= "0" | [1-9] [0-9]?
`)
	for _, ok := range []string{`{"a":0}`, `{"ab_c":12,"x":9}`} {
		if !p.Valid([]byte(ok)) {
			t.Errorf("%s: refused", ok)
		}
	}
	for _, bad := range []string{`{}`, `{"a":01}`, `{"abcde":1}`, `{"a":1`, `{"a":123}`, `{"a":1},`} {
		if p.Valid([]byte(bad)) {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestUnicodeClasses(t *testing.T) {
	p := mustParse(t, `root ::= [^a-z"]+ "." [é-ü]`)
	for _, ok := range []string{"ÀB€😀.é", "X.ü"} {
		if !p.Valid([]byte(ok)) {
			t.Errorf("%q: refused", ok)
		}
	}
	for _, bad := range []string{"a.é", "X.z", "\"X.é", "X.\xc3"} {
		if p.Valid([]byte(bad)) {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestGrammarErrors(t *testing.T) {
	for src, want := range map[string]string{
		`root ::= a` + "\n" + `a ::= a "x" | "y"`: "left-recursive",
		`root ::= b`:                           `undefined rule "b"`,
		`root ::= "abc`:                        "unterminated string",
		`root ::= [a-`:                         "unterminated character class",
		`rot ::= "a"`:                          "no rule named root",
		`root ::= "a"{3,2}`:                    "min ≤ max",
		`root ::= "a"{5000}`:                   "min ≤ max",
		`root ::= "a" "\q"`:                    `unknown escape`,
		`root ::= "x"? root`:                   "left-recursive",
		`root ::= "a"` + "\n" + `root ::= "b"`: "defined twice",
	} {
		_, err := ParseProgram(src)
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrGrammar) {
			t.Errorf("%q: got %v, want an error containing %q", src, err, want)
		}
	}
}

func TestRegex(t *testing.T) {
	g, err := FromRegex(`^[A-Z]{2}-\d{3,4}(x|yz)?$`)
	if err != nil {
		t.Fatal(err)
	}
	p := MustCompile(g)
	for _, ok := range []string{"AB-123", "QZ-9999yz", "AA-000x"} {
		if !p.Valid([]byte(ok)) {
			t.Errorf("%q: refused", ok)
		}
	}
	for _, bad := range []string{"ab-123", "AB-12", "AB-12345", "AB-123xy"} {
		if p.Valid([]byte(bad)) {
			t.Errorf("%q: accepted", bad)
		}
	}
	for _, bad := range []string{`(a)\1`, `a\bb`, `a^b`, `(?=a)`} {
		if _, err := FromRegex(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestIntRange checks the digit-range grammar against every integer near the bounds.
func TestIntRange(t *testing.T) {
	for _, c := range [][2]int64{{0, 0}, {-5, 5}, {7, 123}, {-130, -17}, {95, 1050}, {0, 9}, {10, 99}} {
		p := MustCompile(&Grammar{Rules: map[string]Expr{"root": intRange(c[0], c[1])}, Root: "root"})
		for x := c[0] - 200; x <= c[1]+200; x++ {
			s := itoa(x)
			if got, want := p.Valid([]byte(s)), x >= c[0] && x <= c[1]; got != want {
				t.Fatalf("range %v: %s valid = %v", c, s, got)
			}
		}
		if p.Valid([]byte("007")) || p.Valid([]byte("-0")) {
			t.Errorf("range %v: leading zeros or -0 accepted", c)
		}
	}
}

// TestIntRangeWide: a 16-digit range is a grammar of a few KB (it was 3.4 MB, 2^16
// alternatives, when 0…0–9…9 split in two), and right at and around its ends and powers
// of ten.
func TestIntRangeWide(t *testing.T) {
	for _, c := range [][2]int64{{-9000000000000000, 9000000000000000}, {0, 9999999999999999}, {1234567890123456, 9876543210987654}, {100, 999999}} {
		g := &Grammar{Rules: map[string]Expr{"root": intRange(c[0], c[1])}, Root: "root"}
		if n := len(g.String()); n > 20000 {
			t.Errorf("range %v: grammar of %d bytes", c, n)
		}
		p := MustCompile(g)
		var probes []int64
		for _, e := range []int64{c[0], c[1], 0, 1, 10, 99, 100, 1000000, 999999999999999, 1000000000000000} {
			probes = append(probes, e-1, e, e+1, -e)
		}
		for _, x := range probes {
			if got, want := p.Valid([]byte(itoa(x))), x >= c[0] && x <= c[1]; got != want {
				t.Errorf("range %v: %d valid = %v", c, x, got)
			}
		}
	}
}

func itoa(x int64) string {
	if x < 0 {
		return "-" + itoa(-x)
	}
	if x < 10 {
		return string(rune('0' + x))
	}
	return itoa(x/10) + string(rune('0'+x%10))
}

// walk generates a random sentence of p one byte at a time among the bytes the matcher
// allows, ending when it must or by chance when it may.
func walk(t *testing.T, p *Program, rng *rand.Rand, limit int) ([]byte, bool) {
	m := &Matcher{a: newAutomaton(p, &Vocab{})}
	m.cur = m.a.start
	var out []byte
	for len(out) < limit {
		if m.Done() {
			return out, true
		}
		if m.Accepting() && rng.IntN(4) == 0 {
			return out, true
		}
		var ok []byte
		for b := range 256 {
			if m.a.step(m.cur, byte(b)) != 0 {
				ok = append(ok, byte(b))
			}
		}
		if len(ok) == 0 {
			t.Fatalf("stuck after %q", out)
		}
		b := ok[rng.IntN(len(ok))]
		if err := m.AcceptBytes([]byte{b}); err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out, false
}

// TestAmbiguityBound: a grammar with a stack for every way to go on fails with an error
// instead of slowing every step.
func TestAmbiguityBound(t *testing.T) {
	g, err := FromRegex(`(a?){1000}(a?){1000}b`)
	if err != nil {
		t.Fatal(err)
	}
	p := MustCompile(g)
	m := NewMatcher(p, NewVocab(2, func(id int32) string { return "ab"[id : id+1] }, nil))
	if err := m.Mask(make([]float32, 2)); err == nil || !strings.Contains(err.Error(), "too ambiguous") {
		t.Errorf("got %v", err)
	}
	if err := m.Accept(0); err == nil {
		t.Error("Accept after the bound: no error")
	}
	if p.Valid([]byte("aab")) {
		t.Error("Valid past the bound")
	}
}
