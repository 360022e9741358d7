package ops

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

type prometheusConfig struct {
	RuleFiles     []string       `yaml:"rule_files"`
	ScrapeConfigs []scrapeConfig `yaml:"scrape_configs"`
}

type scrapeConfig struct {
	JobName string   `yaml:"job_name"`
	DNSSD   []dnsSD  `yaml:"dns_sd_configs"`
	FileSD  []fileSD `yaml:"file_sd_configs"`
}

type dnsSD struct {
	Names []string `yaml:"names"`
	Type  string   `yaml:"type"`
	Port  int      `yaml:"port"`
}

type fileSD struct {
	Files []string `yaml:"files"`
}

func loadPrometheusConfig(t *testing.T) *prometheusConfig {
	t.Helper()
	var c prometheusConfig
	if err := yaml.Unmarshal(readFile(t, "ops", "prometheus", "prometheus.yml"), &c); err != nil {
		t.Fatalf("ops/prometheus/prometheus.yml: %v", err)
	}
	return &c
}

func (c *prometheusConfig) job(t *testing.T, name string) *scrapeConfig {
	t.Helper()
	for i := range c.ScrapeConfigs {
		if c.ScrapeConfigs[i].JobName == name {
			return &c.ScrapeConfigs[i]
		}
	}
	t.Fatalf("ops/prometheus/prometheus.yml has no scrape job %q", name)
	return nil
}

// ruleFile is Prometheus's rule file format.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, "ops", "prometheus", "redlite.rules.yml")))
	dec.KnownFields(true)
	var f ruleFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("ops/prometheus/redlite.rules.yml: %v", err)
	}
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// recordedNames are the metric names the recording rules make.
func recordedNames(rules []rule) map[string]bool {
	m := map[string]bool{}
	for _, r := range rules {
		if r.Record != "" {
			m[r.Record] = true
		}
	}
	return m
}

// ruleTests is the part of promtool's unit-test format the coverage check reads.
type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			AlertName string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// runbookBase is where each alert's runbook_url points: ops/RUNBOOK.md on GitHub, at the
// repository the module path names.
const runbookBase = "https://github.com/redlite/batch/blob/main/ops/RUNBOOK.md#"

// githubAnchors are the anchors GitHub gives the headings of a Markdown file.
func githubAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	inCode := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		h = drop.ReplaceAllString(strings.ToLower(h), "")
		anchors[strings.ReplaceAll(h, " ", "-")] = true
	}
	return anchors
}

func TestAlertRules(t *testing.T) {
	rules := loadRules(t)
	recorded := recordedNames(rules)
	anchors := githubAnchors(string(readFile(t, "ops", "RUNBOOK.md")))

	var tests ruleTests
	if err := yaml.Unmarshal(readFile(t, "ops", "prometheus", "redlite.rules_test.yml"), &tests); err != nil {
		t.Fatalf("ops/prometheus/redlite.rules_test.yml: %v", err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName] = true
			} else {
				quiet[a.AlertName] = true
			}
		}
	}

	// The alerts issue 6 asks for, plus RedliteNoWorkerUp.
	want := []string{"RedliteQueueBacklogGrowing", "RedliteJobWaitOverBudget", "RedliteWorkerDown",
		"RedliteNoWorkerUp", "RedliteJobFailureRatioHigh", "RedliteWorkerMemoryNearLimit"}
	var alerts []string
	for _, r := range rules {
		names, err := metricNames(r.Expr)
		if err != nil {
			t.Errorf("rule %s%s: %v", r.Record, r.Alert, err)
		}
		for _, n := range names {
			if strings.Contains(n, ":") && !recorded[n] {
				t.Errorf("rule %s%s uses %s, which no recording rule makes", r.Record, r.Alert, n)
			}
		}
		if r.Alert == "" {
			continue
		}
		alerts = append(alerts, r.Alert)
		if d, err := time.ParseDuration(r.For); err != nil || d <= 0 {
			t.Errorf("alert %s: for %q; every alert waits before it fires", r.Alert, r.For)
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[k] == "" {
				t.Errorf("alert %s has no %s annotation", r.Alert, k)
			}
		}
		anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase)
		if !ok || !anchors[anchor] {
			t.Errorf("alert %s: runbook_url %q is not a heading of ops/RUNBOOK.md (%s…)", r.Alert, r.Annotations["runbook_url"], runbookBase)
		}
		if anchor != strings.ToLower(r.Alert) {
			t.Errorf("alert %s: runbook_url anchor %q, want the alert's own section %q", r.Alert, anchor, strings.ToLower(r.Alert))
		}
		if !fires[r.Alert] || !quiet[r.Alert] {
			t.Errorf("alert %s: redlite.rules_test.yml needs a case where it fires (%v) and one where it stays quiet (%v)", r.Alert, fires[r.Alert], quiet[r.Alert])
		}
	}
	for _, w := range want {
		if !slices.Contains(alerts, w) {
			t.Errorf("alert %s is missing", w)
		}
	}
	cfg := loadPrometheusConfig(t)
	if !slices.Equal(cfg.RuleFiles, []string{"redlite.rules.yml"}) {
		t.Errorf("prometheus.yml loads rule files %q, want redlite.rules.yml", cfg.RuleFiles)
	}
}

// rulesMetricNames are the metric names the rules read, other than recorded ones.
func rulesMetricNames(t *testing.T) map[string][]string {
	rules := loadRules(t)
	recorded := recordedNames(rules)
	uses := map[string][]string{}
	for _, r := range rules {
		names, err := metricNames(r.Expr)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if !recorded[n] {
				uses[n] = append(uses[n], "rule "+r.Record+r.Alert)
			}
		}
	}
	return uses
}

func runPromtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPromtool(t *testing.T) {
	promtool(t)
	dir := repoPath("ops", "prometheus")
	t.Run("CheckConfig", func(t *testing.T) {
		// In a copy with the example target list in place, so that it is checked too and
		// the file_sd glob matches a file.
		tmp := t.TempDir()
		copyTree(t, dir, tmp, nil)
		writeFile(t, filepath.Join(tmp, "targets", "macs.yml"), string(readFile(t, "ops", "prometheus", "targets", "macs.yml.example")))
		out := runPromtool(t, tmp, "check", "config", "prometheus.yml")
		if strings.Contains(out, "WARNING") {
			t.Errorf("promtool check config warns:\n%s", out)
		}
	})
	t.Run("CheckRules", func(t *testing.T) {
		runPromtool(t, dir, "check", "rules", "redlite.rules.yml")
	})
	t.Run("TestRules", func(t *testing.T) {
		runPromtool(t, dir, "test", "rules", "redlite.rules_test.yml")
	})
}
