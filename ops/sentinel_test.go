package ops

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlite/batch/internal/redisx"
	"gopkg.in/yaml.v3"
)

// TestComposeSentinel checks ops/compose.sentinel.yml, the Sentinel layer over
// docker-compose.yml, without a container engine: strictly decoded; what it adds is in the
// sentinel profile; the worker and dashboard reach Redis through all three sentinels and the
// primary that ops/redis/sentinel.conf monitors; and the primary's and a sentinel's own
// commands, run with a local redis-server, start and see each other with the password.
func TestComposeSentinel(t *testing.T) {
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, "ops", "compose.sentinel.yml")))
	dec.KnownFields(true)
	var c composeFile
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("ops/compose.sentinel.yml: %v", err)
	}
	base := loadCompose(t)
	var sentinels []string
	for name, s := range c.Services {
		if base.Services[name] != nil {
			if s.Image != "" || len(s.Profiles) > 0 {
				t.Errorf("%s: the layer should change only the command of a base service", name)
			}
			continue
		}
		if !slices.Equal(s.Profiles, []string{"sentinel"}) {
			t.Errorf("%s: profiles %v, want [sentinel]", name, s.Profiles)
		}
		if !imagePin.MatchString(s.Image) || s.Image != base.Services["redis"].Image {
			t.Errorf("%s: image %q, want the base redis image %q", name, s.Image, base.Services["redis"].Image)
		}
		for _, f := range s.EnvFiles {
			if _, err := os.Stat(repoPath(f + ".example")); err != nil {
				t.Errorf("%s: env_file %s has no %s.example beside it", name, f, f)
			}
		}
		if s.Healthcheck == nil || s.Restart != "unless-stopped" {
			t.Errorf("%s: needs a health check and restart: unless-stopped", name)
		}
		for _, m := range s.mounts(t) {
			if _, declared := c.Volumes[m.source]; !m.bind && !declared {
				t.Errorf("%s: volume %s is not declared", name, m.source)
			}
		}
		if strings.HasPrefix(name, "sentinel-") {
			sentinels = append(sentinels, name+":26379")
		}
	}
	if len(sentinels) != 3 || c.Services["redis-replica"] == nil {
		t.Fatalf("want a replica and three sentinels, have %v", sentinels)
	}
	master, quorum := sentinelMonitor(t)
	if quorum != 2 {
		t.Errorf("quorum %d, want 2 of 3", quorum)
	}

	const password = "test-password-0123"
	for _, name := range []string{"worker", "dashboard"} {
		env, _, err := execEnv(t, name, c.Services[name], map[string]string{"REDIS_PASSWORD": password})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		u, err := redisx.Parse(env["REDLITE_REDIS_URL"])
		if err != nil {
			t.Fatalf("%s: REDLITE_REDIS_URL: %v", name, err)
		}
		got := slices.Clone(u.Sentinels)
		slices.Sort(got)
		slices.Sort(sentinels)
		if u.Master != master || !slices.Equal(got, sentinels) || u.Password != password {
			t.Errorf("%s reaches %s, want the sentinels %v and primary %q", name, u, sentinels, master)
		}
	}

	t.Run("Run", func(t *testing.T) {
		needTool(t, "redis-server", "apt-get install redis-server")
		env := map[string]string{"REDIS_PASSWORD": password}
		primaryPort := freePort(t)
		primaryScript := strings.Replace(shellScript(t, "redis", c.Services["redis"]), "/usr/local/etc/redis/redis.conf", repoPath("ops", "redis", "redis.conf"), 1)
		startScript(t, "redis", primaryScript+fmt.Sprintf(" --port %d --bind 127.0.0.1 --dir %s --daemonize no", primaryPort, t.TempDir()), env)
		rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", primaryPort), Password: password})
		defer rdb.Close()
		waitRedis(t, rdb)
		// With no replica in sync the primary refuses writes (min-replicas-to-write 1).
		if err := rdb.Set(context.Background(), "k", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOREPLICAS") {
			t.Errorf("a write with no replica: %v, want NOREPLICAS", err)
		}

		// A sentinel with the repository's file, the primary's host made local.
		dir, mounted := t.TempDir(), filepath.Join(t.TempDir(), "sentinel.conf")
		conf := strings.Replace(string(readFile(t, "ops", "redis", "sentinel.conf")),
			fmt.Sprintf("sentinel monitor %s redis 6379", master), fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d", master, primaryPort), 1)
		writeFile(t, mounted, conf)
		script := strings.NewReplacer("/usr/local/etc/redis/sentinel.conf", mounted, "/data/", dir+"/").
			Replace(shellScript(t, "sentinel-1", c.Services["sentinel-1"]))
		sentinelPort := freePort(t)
		startScript(t, "sentinel-1", script+fmt.Sprintf(" --port %d --bind 127.0.0.1 --dir %s", sentinelPort, dir), env)
		sc := redis.NewSentinelClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", sentinelPort)})
		defer sc.Close()
		deadline := time.Now().Add(20 * time.Second)
		for {
			m, err := sc.Master(context.Background(), master).Result()
			// The sentinel reached the primary with the password: it knows its run id.
			if err == nil && m["runid"] != "" && !strings.Contains(m["flags"], "down") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the sentinel does not see the primary: %v %v", m, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// sentinelMonitor reads the primary's name and the quorum from ops/redis/sentinel.conf.
func sentinelMonitor(t *testing.T) (string, int) {
	t.Helper()
	for _, line := range strings.Split(string(readFile(t, "ops", "redis", "sentinel.conf")), "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && f[0] == "sentinel" && f[1] == "monitor" {
			var q int
			fmt.Sscan(f[5], &q)
			return f[2], q
		}
	}
	t.Fatal("ops/redis/sentinel.conf has no sentinel monitor line")
	return "", 0
}

// startScript runs a service's script in env until the test ends.
func startScript(t *testing.T, name, script string, env map[string]string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var logb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logb, &logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s:\n%s", name, logb.String())
		}
	})
}

func waitRedis(t *testing.T, rdb *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for rdb.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("redis did not answer")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
