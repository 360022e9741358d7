package jinja

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestJinja2Snippets renders testdata/snippets.txt and compares each output with what
// Python's jinja2 rendered (testdata/jinja2.json, made by testdata/make_jinja2.py); where
// jinja2 raised, the render must fail.
func TestJinja2Snippets(t *testing.T) {
	raw, err := os.ReadFile("testdata/jinja2.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vars  json.RawMessage
		Cases []struct{ Src, Out, Error string }
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) < 100 {
		t.Fatalf("%d cases, want at least 100", len(f.Cases))
	}
	v, err := FromJSON(f.Vars)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]Value{}
	for _, k := range v.(*Dict).Keys() {
		vars[k], _ = v.(*Dict).Get(k)
	}
	for _, c := range f.Cases {
		tm, err := Compile(c.Src)
		out := ""
		if err == nil {
			out, err = tm.Render(vars, Limits{})
		}
		switch {
		case c.Error != "" && err == nil:
			t.Errorf("%q rendered %q; jinja2 raised %s", c.Src, out, c.Error)
		case c.Error != "":
			var je *Error
			if !errors.As(err, &je) {
				t.Errorf("%q: %v is not a template error", c.Src, err)
			}
		case err != nil:
			t.Errorf("%q: %v; jinja2 rendered %q", c.Src, err, c.Out)
		case out != c.Out:
			t.Errorf("%q:\n got %q\nwant %q", c.Src, out, c.Out)
		}
	}
}

// TestLimits: hostile templates stop with ErrLimit, quickly, instead of hanging the worker or
// exhausting its memory or stack.
func TestLimits(t *testing.T) {
	lim := Limits{Timeout: 500 * time.Millisecond, MaxOutput: 1 << 20}
	for _, c := range []struct{ name, src string }{
		{"LongLoop", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"},
		{"Output", "{% for i in range(10000000) %}xxxxxxxxxx{% endfor %}"},
		{"Doubling", "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"},
		{"Repeat", "{{ 'x' * 100000000000 }}"},
		{"Range", "{{ range(10000000000)|length }}"},
		{"Recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"},
		{"RecursiveLoop", "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}"},
		{"Unique", "{{ range(30000)|unique|list|length }}"},
		{"QuadraticIn", "{% set l = range(200000)|list %}{% for x in l %}{% if x in l %}{% endif %}{% endfor %}"},
		{"Indent", "{% set ns = namespace(s='a\\n') %}{% for i in range(40) %}{% set ns.s = (ns.s ~ ns.s)|indent(8) %}{% endfor %}"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tm, err := Compile(c.src)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = tm.Render(nil, lim)
			if !errors.Is(err, ErrLimit) {
				t.Errorf("error %v, want ErrLimit", err)
			}
			// Not a timing assertion on the engine's speed: a render past its limit must stop,
			// and 20× the timeout says it did not run to completion.
			if d := time.Since(start); d > 20*lim.Timeout {
				t.Errorf("stopped after %v", d)
			}
		})
	}
}

// TestSyntaxErrors: a template that does not parse is refused at Compile with where and why.
func TestSyntaxErrors(t *testing.T) {
	for src, want := range map[string]string{
		"{% if x %}":                  "'if' is not closed",
		"{% for x in y %}{% endif %}": "unexpected 'endif'",
		"{{ x ":                       "not closed",
		"{{ 'abc }}":                  "string literal not closed",
		"{% bogus %}":                 "unknown statement 'bogus'",
		"a\n\n{{ x + }}":              "line 3",
		"{# open":                     "comment not closed",
		"{% raw %}x":                  "raw block not closed",
		"{{ " + strings.Repeat("(", 500) + "1" + strings.Repeat(")", 500) + " }}": "deeper than",
		strings.Repeat("{% if 1 %}", 300):                                         "deeper than",
	} {
		_, err := Compile(src)
		var je *Error
		if !errors.As(err, &je) || je.Kind != "TemplateSyntaxError" || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: %v, want a TemplateSyntaxError saying %q", src, err, want)
		}
	}
}

// TestPythonValues: values print and serialize as Python prints them.
func TestPythonValues(t *testing.T) {
	tenth, zero := 0.1, 0.0
	for f, want := range map[float64]string{
		3: "3.0", 0.5: "0.5", 1e16: "1e+16", 1e-5: "1e-05", 123456.789: "123456.789",
		9999999999999998: "9999999999999998.0", tenth + 0.2: "0.30000000000000004", -zero: "-0.0",
	} {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %q, want %q", f, got, want)
		}
	}
	v, err := FromJSON([]byte(`{"z": 1, "a": [1.0, 2, null, true, "é<&>\u2028"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := toJSON(&b, v, jsonOpts{itemSep: ", ", keySep: ": "}, 0); err != nil {
		t.Fatal(err)
	}
	if want := "{\"z\": 1, \"a\": [1.0, 2, null, true, \"é<&>\u2028\"]}"; b.String() != want {
		t.Errorf("tojson %s, want %s", b.String(), want)
	}
}

// FuzzRender: any template source and any variables compile or fail, and render or fail,
// within the limits: no panic, no hang.
func FuzzRender(f *testing.F) {
	f.Add("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}", `[{"role":"user","content":"hi"}]`)
	f.Add("{%- set ns = namespace(x=messages|length) %}{{ ns.x * 2 }}{{ messages[::-1]|tojson }}", `[1, 2.5, "x"]`)
	f.Add("{% macro m(a, b=2) %}{{ a ~ b }}{% endmacro %}{{ m(messages[0]) }}", `[{"a":null}]`)
	f.Add("{{ messages[0].content.split('</think>')[-1].strip() if messages else raise_exception('no') }}", `[]`)
	f.Add("{% raw %}{{ x }}{% endraw %}{# c #}{%+ if true -%} y {%- endif %}", `{}`)
	f.Fuzz(func(t *testing.T, src, messages string) {
		tm, err := Compile(src)
		if err != nil {
			var je *Error
			if !errors.As(err, &je) {
				t.Fatalf("compile error %v is not a template error", err)
			}
			return
		}
		vars := map[string]Value{"add_generation_prompt": true}
		if v, err := FromJSON([]byte(messages)); err == nil {
			vars["messages"] = v
		}
		out, err := tm.Render(vars, Limits{Timeout: 50 * time.Millisecond, MaxOutput: 1 << 16})
		if err == nil && len(out) > 1<<16 {
			t.Fatalf("output of %d bytes past the limit", len(out))
		}
	})
}
