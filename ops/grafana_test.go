package ops

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Datasource *dsRef          `json:"datasource"`
			Query      json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int     `json:"id"`
	Type        string  `json:"type"`
	Title       string  `json:"title"`
	Description string  `json:"description"`
	Datasource  *dsRef  `json:"datasource"`
	GridPos     gridPos `json:"gridPos"`
	Targets     []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource *dsRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type gridPos struct{ H, W, X, Y int }

type datasource struct {
	Name      string `yaml:"name"`
	UID       string `yaml:"uid"`
	Type      string `yaml:"type"`
	Access    string `yaml:"access"`
	URL       string `yaml:"url"`
	IsDefault bool   `yaml:"isDefault"`
}

func loadDatasource(t *testing.T) datasource {
	t.Helper()
	var f struct {
		APIVersion  int          `yaml:"apiVersion"`
		Datasources []datasource `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(readFile(t, "ops", "grafana", "provisioning", "datasources", "prometheus.yml"), &f); err != nil {
		t.Fatal(err)
	}
	if f.APIVersion != 1 || len(f.Datasources) != 1 {
		t.Fatalf("datasource provisioning: apiVersion %d with %d datasources, want 1 and 1", f.APIVersion, len(f.Datasources))
	}
	return f.Datasources[0]
}

type dashboardProvider struct {
	Name    string `yaml:"name"`
	Type    string `yaml:"type"`
	Options struct {
		Path string `yaml:"path"`
	} `yaml:"options"`
}

func loadDashboardProvider(t *testing.T) dashboardProvider {
	t.Helper()
	var f struct {
		APIVersion int                 `yaml:"apiVersion"`
		Providers  []dashboardProvider `yaml:"providers"`
	}
	if err := yaml.Unmarshal(readFile(t, "ops", "grafana", "provisioning", "dashboards", "redlite.yml"), &f); err != nil {
		t.Fatal(err)
	}
	if f.APIVersion != 1 || len(f.Providers) != 1 || f.Providers[0].Type != "file" {
		t.Fatalf("dashboard provisioning: want apiVersion 1 and one file provider, got %+v", f)
	}
	return f.Providers[0]
}

func loadDashboard(t *testing.T) *dashboard {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(readFile(t, "ops", "grafana", "dashboards", "redlite.json")))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("ops/grafana/dashboards/redlite.json: %v", err)
	}
	return &d
}

// allPanels flattens rows.
func (d *dashboard) allPanels() []panel {
	var out []panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

// query is one PromQL expression of the dashboard, with the place it comes from.
type query struct{ where, expr string }

// labelValues is Grafana's variable query label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// queries returns every PromQL expression of the dashboard, variables expanded: panel
// targets and the selectors of variable queries.
func (d *dashboard) queries() ([]query, error) {
	var qs []query
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			e, err := expandGrafanaVars(tg.Expr)
			if err != nil {
				return nil, fmt.Errorf("panel %q target %s: %w", p.Title, tg.RefID, err)
			}
			qs = append(qs, query{fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), e})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if err := json.Unmarshal(v.Query, &s); err != nil {
				return nil, fmt.Errorf("variable %s: query is neither a string nor {query}", v.Name)
			}
			q.Query = s
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			return nil, fmt.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q.Query)
		}
		qs = append(qs, query{"variable " + v.Name, m[1]})
	}
	return qs, nil
}

// dashboardMetrics are the metric names the dashboard's queries read.
func dashboardMetrics(t *testing.T, d *dashboard) map[string][]string {
	t.Helper()
	qs, err := d.queries()
	if err != nil {
		t.Fatal(err)
	}
	uses := map[string][]string{}
	for _, q := range qs {
		names, err := metricNames(q.expr)
		if err != nil {
			t.Fatalf("%s: %v", q.where, err)
		}
		if len(names) == 0 {
			t.Errorf("%s reads no metric: %s", q.where, q.expr)
		}
		for _, n := range names {
			uses[n] = append(uses[n], q.where)
		}
	}
	return uses
}

// dashboardMustShow are the metrics behind what issue 6 asks the dashboard to show: queue
// depth and age, jobs by type and outcome, job duration and queue wait, prefill and decode
// speed, planned memory against the limit, plan choices, worker up/down; and what issue 12
// adds: jobs re-routed and refused at submit, the largest job per worker.
var dashboardMustShow = []string{
	"asynq_tasks_enqueued_total", "asynq_queue_latency_seconds",
	"redlite_jobs_total",
	"redlite_job_duration_seconds_bucket", "redlite_job_queue_wait_seconds_bucket",
	"redlite_prefill_tokens_per_second_sum", "redlite_decode_tokens_per_second_sum",
	"redlite_planned_memory_bytes", "redlite_memory_limit_bytes",
	"redlite_plans_total",
	"redlite_jobs_rerouted_total", "redlite_jobs_refused_total", "redlite_worker_max_context_tokens",
	"up",
}

func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	ds := loadDatasource(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q: both are needed for stable links", d.UID, d.Title)
	}
	if ds.Type != "prometheus" || ds.UID == "" || !ds.IsDefault {
		t.Errorf("datasource %+v: want the default prometheus datasource with a fixed uid", ds)
	}

	ids := map[int]bool{}
	var placed []panel
	for _, p := range d.allPanels() {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v is outside Grafana's 24 columns", p.Title, g)
		}
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if p.Type == "row" {
			continue
		}
		if p.Description == "" {
			t.Errorf("panel %q has no description (the ⓘ a reader hovers)", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != ds.UID {
			t.Errorf("panel %q: datasource %+v, want uid %q from provisioning", p.Title, p.Datasource, ds.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Expr == "" || refs[tg.RefID] {
				t.Errorf("panel %q: target %q is empty or its refId is used twice", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource != nil && tg.Datasource.UID != ds.UID {
				t.Errorf("panel %q target %s: datasource uid %q, want %q", p.Title, tg.RefID, tg.Datasource.UID, ds.UID)
			}
		}
		for _, q := range placed {
			if overlap(p.GridPos, q.GridPos) {
				t.Errorf("panels %q and %q overlap", p.Title, q.Title)
			}
		}
		placed = append(placed, p)
	}
	for _, v := range d.Templating.List {
		if v.Datasource == nil || v.Datasource.UID != ds.UID {
			t.Errorf("variable %s: datasource %+v, want uid %q", v.Name, v.Datasource, ds.UID)
		}
	}

	uses := dashboardMetrics(t, d)
	for _, m := range dashboardMustShow {
		if len(uses[m]) == 0 {
			t.Errorf("no panel reads %s", m)
		}
	}
	recorded := recordedNames(loadRules(t))
	for n, where := range uses {
		if strings.Contains(n, ":") && !recorded[n] {
			t.Errorf("%s: %s is a recording-rule name that redlite.rules.yml does not record", where[0], n)
		}
	}
}

func overlap(a, b gridPos) bool {
	return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
}

// TestDashboardQueriesArePromQL has promtool parse every query of the dashboard, as the
// expression of a recording rule in a scratch rule file.
func TestDashboardQueriesArePromQL(t *testing.T) {
	promtool(t)
	qs, err := loadDashboard(t).queries()
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rec
	for i, q := range qs {
		rules = append(rules, rec{fmt.Sprintf("dashboard_query_%d", i), q.expr})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "dashboard.rules.yml"), string(b))
	out := runPromtool(t, dir, "check", "rules", "dashboard.rules.yml")
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(qs)); !strings.Contains(out, want) {
		t.Errorf("promtool: %s, want %q", out, want)
	}
}

func TestGrafanaProvisioning(t *testing.T) {
	prov := loadDashboardProvider(t)
	if !strings.HasPrefix(prov.Options.Path, "/") {
		t.Errorf("provider path %q must be absolute (a path in the container)", prov.Options.Path)
	}
	ds := loadDatasource(t)
	if ds.Access != "proxy" || !strings.HasPrefix(ds.URL, "http://") {
		t.Errorf("datasource access %q url %q: want proxy access to an http URL", ds.Access, ds.URL)
	}
	if d := loadDashboard(t); slices.ContainsFunc(d.Panels, func(p panel) bool { return p.Datasource != nil && p.Datasource.Type != ds.Type }) {
		t.Error("a panel names a datasource type other than the provisioned one")
	}
}
