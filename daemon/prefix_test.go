package daemon

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlite/batch/internal/testlog"
	"github.com/redlite/batch/jobs"
)

// TestPrefixCache asks two questions about one long document, one job after the other: on
// a batching worker (the prefix cache in its scheduler, on by default) and on a worker of one
// job at a time with REDLITE_PREFIX_CACHE_DIR (snapshots on disk). The second job starts from
// the document's blocks (usage.cached_tokens) with the greedy text the same job gets without
// a cache, and the metrics count the tokens saved.
func TestPrefixCache(t *testing.T) {
	b := setup(t)
	doc := strings.Repeat("The supplier delivers forty crates every Monday and invoices at the end of the month. ", 40)
	var questions []*jobs.Generate
	for _, q := range []string{"When are the crates delivered?", "How many crates a week?"} {
		questions = append(questions, &jobs.Generate{MaxTokens: ptr(6), Temperature: ptr(0.0),
			Messages: []jobs.Message{{Role: jobs.RoleSystem, Content: doc}, {Role: jobs.RoleUser, Content: q}}})
	}
	run := func(t *testing.T, cfg Config) ([]jobs.Result, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		d, err := New(cfg, Options{Logger: testlog.New(t, slog.LevelDebug), Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(context.Background()); err != nil {
			d.Shutdown()
			t.Fatal(err)
		}
		defer d.Shutdown()
		var out []jobs.Result
		for _, s := range questions {
			res, err := waitResult(t, b.client, enqueue(t, b.client, s).ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, res)
		}
		return out, reg
	}
	off := b.cfg
	off.PrefixCacheMiB = 0
	want, _ := run(t, off)
	for _, tc := range []struct {
		name        string
		concurrency int
		dir         string
	}{
		{"Batching", 2, ""},
		{"Sessions", 1, t.TempDir()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := b.cfg
			cfg.Concurrency, cfg.PrefixCacheDir = tc.concurrency, tc.dir
			got, reg := run(t, cfg)
			if got[0].Usage.CachedTokens != 0 || got[1].Usage.CachedTokens < 256 || got[1].Usage.CachedTokens%256 != 0 {
				t.Errorf("cached tokens %d then %d, want 0 then whole blocks of the document", got[0].Usage.CachedTokens, got[1].Usage.CachedTokens)
			}
			for i := range got {
				if got[i].Text != want[i].Text || got[i].Usage.PromptTokens != want[i].Usage.PromptTokens {
					t.Errorf("summary %d: %q (%+v) with the cache, %q (%+v) without", i, got[i].Text, got[i].Usage, want[i].Text, want[i].Usage)
				}
			}
			if n := gatheredCounter(t, reg, "redlite_prefix_cache_tokens_saved_total"); n != float64(got[1].Usage.CachedTokens) {
				t.Errorf("redlite_prefix_cache_tokens_saved_total %v, want %d", n, got[1].Usage.CachedTokens)
			}
			if tc.dir != "" {
				if files, _ := os.ReadDir(tc.dir); len(files) == 0 {
					t.Error("no snapshot in REDLITE_PREFIX_CACHE_DIR")
				}
			}
		})
	}
}

// gatheredCounter reads a registered counter of one series.
func gatheredCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
