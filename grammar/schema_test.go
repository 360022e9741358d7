package grammar

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redlite/batch/grammar/grammartest"
)

func TestSchemaSentencesValidate(t *testing.T) {
	for name, schema := range grammartest.Schemas {
		t.Run(name, func(t *testing.T) {
			g, err := FromJSONSchema([]byte(schema))
			if err != nil {
				t.Fatal(err)
			}
			p, err := Compile(g)
			if err != nil {
				t.Fatalf("%v\n%s", err, g)
			}
			complete := 0
			for seed := range uint64(300) {
				rng := rand.New(rand.NewPCG(seed, 1))
				out, ok := walk(t, p, rng, 4000)
				if !ok {
					continue // a walk that ran long is not a sentence
				}
				complete++
				if err := grammartest.Validate([]byte(schema), out); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
			if complete < 100 {
				t.Errorf("only %d of 300 walks completed", complete)
			}
		})
	}
}

func TestJSONObject(t *testing.T) {
	p := MustCompile(JSONObject())
	for _, ok := range []string{`{}`, `{"a":[1,2.5e3,{"b":null}],"c":"\u00e9\n"}`} {
		if !p.Valid([]byte(ok)) {
			t.Errorf("%s refused", ok)
		}
	}
	for _, bad := range []string{`[]`, `{"a"}`, `{"a":01}`, `"x"`} {
		if p.Valid([]byte(bad)) {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestSchemaRefusals(t *testing.T) {
	for schema, want := range map[string]string{
		`{"type":"string","format":"hostname"}`:           `format "hostname"`,
		`{"type":"string","format":"date","pattern":"x"}`: `format together with pattern`,
		`{"type":"array","uniqueItems":true}`:             `keyword "uniqueItems"`,
		`{"allOf":[{"type":"string"}]}`:                   `keyword "allOf"`,
		`{"type":"number","multipleOf":2}`:                `keyword "multipleOf"`,
		`{"type":"object","patternProperties":{}}`:        `keyword "patternProperties"`,
		`{"type":"string","minimum":2}`:                   `"minimum" does not apply`,
		`{"$ref":"https://example.com/s.json"}`:           `$ref`,
		`{"type":"object","required":["a"]}`:              `required names "a"`,
		`{"type":"string","pattern":"(a)\\1"}`:            `pattern`,
		`{"type":"widget"}`:                               `type "widget"`,
		`{"type":"number","minimum":0.5}`:                 `whole-number bounds`,
		`false`:                                           `admits no value`,
		`{"type":"array","items":[{"type":"string"}]}`:    `tuple`,
		`{"type":"string","maxLength":5000}`:              `maxLength`,
		`{"type":"object","properties":{"a":{"not":{}}}}`: `keyword "not"`,
		`{"type":"string",`:                               `JSON Schema`,
	} {
		_, err := FromJSONSchema([]byte(schema))
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrGrammar) {
			t.Errorf("%s: got %v, want an error containing %q", schema, err, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`root ::= "a" [b-d]* ("e" | x){2,3}` + "\nx ::= [^\\n]")
	f.Add(`root ::= root`)
	f.Fuzz(func(t *testing.T, src string) {
		p, err := ParseProgram(src)
		if err != nil {
			return
		}
		// Drive the matcher as the engine does: mask, take the first allowed token, go on.
		m := NewMatcher(p, byteVocab())
		logits := make([]float32, 257)
		for range 32 {
			if m.Done() {
				return
			}
			clear(logits)
			if err := m.Mask(logits); err != nil {
				return
			}
			next := slices.IndexFunc(logits, func(l float32) bool { return !math.IsInf(float64(l), -1) })
			if next < 0 {
				return // a grammar can require what no byte gives (an empty class)
			}
			if err := m.Accept(int32(next)); err != nil {
				t.Fatalf("token %d allowed by Mask, refused by Accept: %v", next, err)
			}
		}
	})
}

func FuzzRegex(f *testing.F) {
	f.Add(`^[A-Z]{2}-\d+(x|y)?$`)
	f.Add(`(?i)é.*`)
	f.Fuzz(func(t *testing.T, pattern string) {
		g, err := FromRegex(pattern)
		if err != nil {
			return
		}
		if p, err := Compile(g); err == nil {
			p.Valid([]byte(pattern))
		}
	})
}

func FuzzJSONSchema(f *testing.F) {
	for _, s := range grammartest.Schemas {
		f.Add(s)
	}
	f.Add(`{"type":["string","null"],"maxLength":3}`)
	f.Fuzz(func(t *testing.T, schema string) {
		g, err := FromJSONSchema([]byte(schema))
		if err != nil {
			return
		}
		if p, err := Compile(g); err == nil {
			p.Valid([]byte(`{"a":1}`))
		}
	})
}

// byteVocab has one token per byte and token 256 as the end of generation.
func byteVocab() *Vocab {
	return NewVocab(257, func(id int32) string {
		if id == 256 {
			return ""
		}
		return string([]byte{byte(id)})
	}, []int32{256})
}

// generate samples one document through Mask and Accept, as the engine does, with random
// logits.
func generate(t *testing.T, m *Matcher, rng *rand.Rand) ([]byte, bool) {
	var out []byte
	logits := make([]float32, 257)
	for len(out) < 4000 {
		if m.Done() {
			return out, true
		}
		for i := range logits {
			logits[i] = float32(rng.NormFloat64())
		}
		if err := m.Mask(logits); err != nil {
			t.Fatal(err)
		}
		best := -1
		for i, l := range logits {
			if !math.IsInf(float64(l), -1) && (best < 0 || l > logits[best]) {
				best = i
			}
		}
		if best < 0 {
			t.Fatalf("no token allowed after %q", out)
		}
		if err := m.Accept(int32(best)); err != nil {
			t.Fatal(err)
		}
		if best == 256 {
			return out, true
		}
		out = append(out, byte(best))
	}
	return out, false
}

// TestSharedMatchers: matchers of one program share states across goroutines, and keep
// matching after their automaton is retired for holding too many states.
func TestSharedMatchers(t *testing.T) {
	schema := grammartest.Schemas["person"]
	g, err := FromJSONSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	p := MustCompile(g)
	v := byteVocab()
	if a, b := NewMatcher(p, v), NewMatcher(p, v); a.a != b.a {
		t.Fatal("two matchers of one program and vocabulary do not share states")
	}
	for _, limit := range []int{maxStates, 40} {
		saved := maxStates
		maxStates = limit
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for seed := range uint64(20) {
					out, ok := generate(t, NewMatcher(p, v), rand.New(rand.NewPCG(seed, uint64(w))))
					if !ok {
						continue
					}
					if err := grammartest.Validate([]byte(schema), out); err != nil {
						t.Errorf("states ≤ %d, worker %d seed %d: %v", limit, w, seed, err)
					}
				}
			})
		}
		wg.Wait()
		maxStates = saved
	}
}
