package layout

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOneDefinition: each memory term of the planner's model is computed in one place and
// called everywhere else; so are asynq's key names, the Redis client and its environment. A second formula elsewhere (a KV size multiplied out by hand, a
// routed-expert test by tensor-name suffix) is how the engine, modelinfo and the planner
// drifted apart before; this names the file that does it.
func TestOneDefinition(t *testing.T) {
	rules := []struct {
		re   *regexp.Regexp
		home string // the one package directory allowed to hold it
		what string
	}{
		{regexp.MustCompile(`func KVBytesPerPosition\(`), "engine/ml", "the KV cache's bytes per position"},
		{regexp.MustCompile(`(?i)kvElems|\* 2, F16:|kvPerPos\b`), "", "a KV size multiplied out by hand (call ml.KVBytesPerPosition)"},
		{regexp.MustCompile(`"_exps"`), "engine/modelinfo", "the routed-expert test on tensor names (call modelinfo.TensorRole or Classify)"},
		{regexp.MustCompile(`func \w*StateBytes\(`), "engine/modelinfo", "a recurrent state's bytes (call modelinfo.GatedDeltaNetStateBytes)"},
		{regexp.MustCompile(`"asynq:`), "internal/redisx", "an asynq key name (call redisx.TaskKey, LeaseKey, …)"},
		{regexp.MustCompile(`MakeRedisClient\(\)|redis\.New(Client|FailoverClient|UniversalClient)\(`), "internal/redisx", "a Redis client (call redisx.NewClient, once per process)"},
		{regexp.MustCompile(`env:"REDLITE_REDIS_`), "internal/redisx", "a REDLITE_REDIS_* variable (embed redisx.Env)"},
		{regexp.MustCompile(`env:"REDLITE_LOG_`), "internal/envconf", "a REDLITE_LOG_* variable (embed envconf.Log)"},
		{regexp.MustCompile(`env:"REDLITE_WEBHOOK_(SECRET|ALLOW)`), "jobs", "a webhook secret or allowlist variable (embed jobs.WebhookEnv)"},
	}
	root := "../.."
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, r := range rules {
			if filepath.Dir(rel) == r.home {
				continue
			}
			if loc := r.re.FindIndex(b); loc != nil {
				line := 1 + strings.Count(string(b[:loc[0]]), "\n")
				t.Errorf("%s:%d computes %s outside %s", rel, line, r.what, r.home)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
