package ops

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// promqlKeywords are the words of PromQL that are not metric names when they are not
// followed by "(": binary operators, modifiers and the two special numbers.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"inf": true, "nan": true,
}

// promqlLabelLists are the words followed by a parenthesized list of label names.
var promqlLabelLists = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// grafanaVars are the Grafana variables the dashboard may use, with a value that makes the
// expression valid PromQL for checking.
var grafanaVars = map[string]string{
	"$__rate_interval": "1m",
	"$__interval":      "1m",
	"$__range":         "1h",
	"${instance}":      ".*",
	"$instance":        ".*",
}

// expandGrafanaVars replaces the dashboard's variables; an unknown one is an error.
func expandGrafanaVars(expr string) (string, error) {
	keys := make([]string, 0, len(grafanaVars))
	for k := range grafanaVars {
		keys = append(keys, k)
	}
	// Longest first, so that $__rate_interval is not read as $__r…, $instance not as $i….
	slices.SortFunc(keys, func(a, b string) int { return len(b) - len(a) })
	for _, k := range keys {
		expr = strings.ReplaceAll(expr, k, grafanaVars[k])
	}
	if i := strings.IndexByte(expr, '$'); i >= 0 {
		return "", fmt.Errorf("unknown Grafana variable at %q", expr[i:])
	}
	return expr, nil
}

// metricNames returns the metric names a PromQL expression selects, in order of first
// appearance. It is a scanner, not a parser: it skips strings, label matchers ({…}),
// ranges ([…]), numbers and durations, function and aggregation names (a word followed by
// "(") with the label lists of by/without/on/ignoring/group_left/group_right, and keywords.
// Syntax is promtool's job (TestDashboardQueriesArePromQL).
func metricNames(expr string) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	i, depth := 0, 0
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(expr, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '{' || c == '[':
			end, err := skipGroup(expr, i)
			if err != nil {
				return nil, err
			}
			i = end
		case isDigit(c) || (c == '.' && i+1 < len(expr) && isDigit(expr[i+1])):
			// A number (0.95, 1e3, 0x1f) or a duration (5m, 1h30m): digits, letters, dots,
			// and a sign right after an exponent.
			i++
			for i < len(expr) && (isWordByte(expr[i]) || expr[i] == '.' ||
				((expr[i] == '+' || expr[i] == '-') && (expr[i-1] == 'e' || expr[i-1] == 'E'))) {
				i++
			}
		case isWordStart(c):
			start := i
			for i < len(expr) && (isWordByte(expr[i]) || expr[i] == ':') {
				i++
			}
			word := expr[start:i]
			next := skipSpace(expr, i)
			lower := strings.ToLower(word)
			switch {
			case promqlLabelLists[lower]:
				if next < len(expr) && expr[next] == '(' {
					end, err := skipGroup(expr, next)
					if err != nil {
						return nil, err
					}
					i = end
				}
			case next < len(expr) && expr[next] == '(', aggregationModifier(expr[next:]):
				// A function or an aggregation (sum(…), sum by (…) (…)): its arguments are
				// scanned in turn.
			case promqlKeywords[lower]:
			default:
				if !seen[word] {
					seen[word] = true
					names = append(names, word)
				}
			}
		case c == '(':
			depth++
			i++
		case c == ')':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("unbalanced ')' at offset %d of %q", i, expr)
			}
			i++
		default:
			i++
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%d unclosed '(' in %q", depth, expr)
	}
	return names, nil
}

// aggregationModifier reports whether s starts with "by" or "without" as a word, which
// makes the word before it an aggregation.
func aggregationModifier(s string) bool {
	for _, w := range []string{"by", "without"} {
		if len(s) > len(w) && strings.EqualFold(s[:len(w)], w) && !isWordByte(s[len(w)]) {
			return true
		}
	}
	return false
}

func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		if s[j] == '\\' && q != '`' {
			j++
			continue
		}
		if s[j] == q {
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at offset %d of %q", i, s)
}

// skipGroup skips a bracketed group ({…}, […], (…)) with the strings and groups inside it.
func skipGroup(s string, i int) (int, error) {
	closer := map[byte]byte{'{': '}', '[': ']', '(': ')'}
	stack := []byte{closer[s[i]]}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(s, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case closer[c] != 0:
			stack = append(stack, closer[c])
		case c == stack[len(stack)-1]:
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return j + 1, nil
			}
		case c == '}' || c == ']' || c == ')':
			return 0, fmt.Errorf("unbalanced %q at offset %d of %q", c, j, s)
		}
	}
	return 0, fmt.Errorf("unclosed %q at offset %d of %q", s[i], i, s)
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

func isDigit(c byte) bool     { return c >= '0' && c <= '9' }
func isWordStart(c byte) bool { return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isWordByte(c byte) bool  { return isWordStart(c) || isDigit(c) }

func TestMetricNames(t *testing.T) {
	cases := []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`sum(up{job="redlited"}) or vector(0)`, []string{"up"}},
		{`count(up{job="redlited"} == 0) or vector(0)`, []string{"up"}},
		{`histogram_quantile(0.95, sum by (le, type) (rate(redlite_job_duration_seconds_bucket{job="redlited", outcome="completed"}[15m])))`,
			[]string{"redlite_job_duration_seconds_bucket"}},
		{`sum by (instance) (rate(a_sum{instance=~"x|y"}[5m])) / sum by (instance) (rate(a_count[5m]))`,
			[]string{"a_sum", "a_count"}},
		{`x > on (queue) (budget or on (queue) (0 * x + 3600))`, []string{"x", "budget"}},
		{`a / on (instance) group_left (model, architecture) b offset 5m`, []string{"a", "b"}},
		{`redlite:queue_pending:max > 0 and deriv(redlite:queue_pending:max[15m]) > 0`,
			[]string{"redlite:queue_pending:max"}},
		{`sum without (le) (rate(h_bucket[1h:5m])) > bool 1e-3`, []string{"h_bucket"}},
		{`label_replace(m, "dst", "$1", "src", "(.*)")`, []string{"m"}},
		{`{__name__="weird"}`, nil},
		{`max_over_time(p{job="redlited", instance=~".*"}[1m]) > 0.98 * l`, []string{"p", "l"}},
		{"count(x) BY (q) AND y", []string{"x", "y"}},
	}
	for _, c := range cases {
		got, err := metricNames(c.expr)
		if err != nil {
			t.Errorf("metricNames(%q): %v", c.expr, err)
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("metricNames(%q) = %q, want %q", c.expr, got, c.want)
		}
	}
	for _, bad := range []string{`up{job="x"`, `rate(x[5m]`, `sum(x))`, `up{job="x}`} {
		if got, err := metricNames(bad); err == nil {
			t.Errorf("metricNames(%q) = %q, want an error", bad, got)
		}
	}
}

func TestExpandGrafanaVars(t *testing.T) {
	got, err := expandGrafanaVars(`rate(x{instance=~"$instance"}[$__rate_interval]) + y[$__range]`)
	if err != nil {
		t.Fatal(err)
	}
	if want := `rate(x{instance=~".*"}[1m]) + y[1h]`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := expandGrafanaVars(`rate(x[$__unknown])`); err == nil {
		t.Error("an unknown variable was accepted")
	}
}
