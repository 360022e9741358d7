package ops

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/redlite/batch/api"
	"github.com/redlite/batch/internal/redisx"
)

// composeFile is the part of the Compose specification docker-compose.yml uses. Decoding
// is strict: a key this struct does not know (a typo such as "healtcheck") fails the test.
type composeFile struct {
	Name     string                     `yaml:"name"`
	Services map[string]*composeService `yaml:"services"`
	Volumes  map[string]*struct{}       `yaml:"volumes"`
}

type composeService struct {
	Image           string                    `yaml:"image"`
	Build           *composeBuild             `yaml:"build"`
	User            string                    `yaml:"user"`
	Command         []string                  `yaml:"command"`
	EnvFiles        stringList                `yaml:"env_file"`
	Environment     map[string]string         `yaml:"environment"`
	Volumes         []string                  `yaml:"volumes"`
	Ports           []string                  `yaml:"ports"`
	MemLimit        string                    `yaml:"mem_limit"`
	StopGracePeriod string                    `yaml:"stop_grace_period"`
	DependsOn       map[string]composeDepends `yaml:"depends_on"`
	Healthcheck     *composeHealth            `yaml:"healthcheck"`
	Restart         string                    `yaml:"restart"`
	Profiles        []string                  `yaml:"profiles"`
}

// stringList is a Compose field that is a string or a list of strings.
type stringList []string

func (l *stringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = []string{n.Value}
		return nil
	}
	var v []string
	if err := n.Decode(&v); err != nil {
		return err
	}
	*l = v
	return nil
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

type composeDepends struct {
	Condition string `yaml:"condition"`
}

type composeHealth struct {
	Test        []string `yaml:"test"`
	Interval    string   `yaml:"interval"`
	Timeout     string   `yaml:"timeout"`
	Retries     int      `yaml:"retries"`
	StartPeriod string   `yaml:"start_period"`
}

// mount is one short-syntax volume: source:target[:mode].
type mount struct {
	source, target string
	readOnly, bind bool
}

func (s *composeService) mounts(t *testing.T) []mount {
	t.Helper()
	var ms []mount
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 {
			t.Fatalf("volume %q: want source:target[:mode]", v)
		}
		m := mount{source: parts[0], target: parts[1]}
		m.bind = strings.HasPrefix(m.source, ".") || strings.HasPrefix(m.source, "/")
		if len(parts) == 3 {
			if parts[2] != "ro" && parts[2] != "rw" {
				t.Fatalf("volume %q: mode %q, want ro or rw", v, parts[2])
			}
			m.readOnly = parts[2] == "ro"
		}
		ms = append(ms, m)
	}
	return ms
}

// hostPath maps a path inside the container to the repository file a bind mount puts there.
func (s *composeService) hostPath(t *testing.T, inContainer string) (string, bool) {
	t.Helper()
	for _, m := range s.mounts(t) {
		if !m.bind {
			continue
		}
		if inContainer == m.target {
			return repoPath(m.source), true
		}
		if rest, ok := strings.CutPrefix(inContainer, m.target+"/"); ok {
			return repoPath(m.source, rest), true
		}
	}
	return "", false
}

func loadCompose(t *testing.T) *composeFile {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, "docker-compose.yml")))
	dec.KnownFields(true)
	var c composeFile
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return &c
}

func (c *composeFile) service(t *testing.T, name string) *composeService {
	t.Helper()
	s := c.Services[name]
	if s == nil {
		t.Fatalf("docker-compose.yml has no service %q", name)
	}
	return s
}

// envExample is the example of an env file (ops/redis.env → ops/redis.env.example) as a map.
func envExample(t *testing.T, envFile string) map[string]string {
	t.Helper()
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, envFile+".example")))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			t.Fatalf("%s.example:%d: want KEY=value, got %q", envFile, n, line)
		}
		env[k] = v
	}
	return env
}

// containerEnv is the environment compose gives a service: its env_file (the example
// copy), then its environment, which wins.
func containerEnv(t *testing.T, s *composeService) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, f := range s.EnvFiles {
		for k, v := range envExample(t, f) {
			env[k] = v
		}
	}
	for k, v := range s.Environment {
		env[k] = v
	}
	return env
}

// unescape turns compose's $$ into the $ the container sees.
func unescape(s string) string { return strings.ReplaceAll(s, "$$", "$") }

// shellScript returns the script of a ["sh", "-c", script] command.
func shellScript(t *testing.T, name string, s *composeService) string {
	t.Helper()
	if len(s.Command) != 3 || s.Command[0] != "sh" || s.Command[1] != "-c" {
		t.Fatalf("service %s: command %q, want [sh -c script]", name, s.Command)
	}
	return unescape(s.Command[2])
}

// runShell runs script with /bin/sh in env and returns its standard output.
func runShell(t *testing.T, script string, env map[string]string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%v: %s", err, errb.String())
	}
	return out.String(), nil
}

// execEnv runs a service's script up to its final `exec`, which it replaces by `exec env`,
// and returns the environment the program would start with, and the program's words.
func execEnv(t *testing.T, name string, s *composeService, env map[string]string) (map[string]string, []string, error) {
	t.Helper()
	script := shellScript(t, name, s)
	i := strings.LastIndex(script, "exec ")
	if i < 0 {
		t.Fatalf("service %s: the script does not end in exec, so the program would not get signals as PID 1: %q", name, script)
	}
	program := strings.Fields(script[i+len("exec "):])
	out, err := runShell(t, script[:i]+"exec env", env)
	if err != nil {
		return nil, program, err
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	return got, program, nil
}

// imagePin is an exact version tag (v1.2.3, 1.2.3-alpine), optionally with a digest.
// Debian's images have no three-part versions; their exact tags are the dated snapshots
// (bookworm-20260824-slim).
var imagePin = regexp.MustCompile(`^[a-z0-9][a-z0-9./_-]*:(v?[0-9]+\.[0-9]+\.[0-9]+|[a-z]+-[0-9]{8})(-[a-z0-9.]+)?(@sha256:[0-9a-f]{64})?$`)

// parseBytes reads compose's byte sizes: 512m, 8g, 1024k, 100b.
func parseBytes(s string) (int64, error) {
	units := map[string]int64{"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimSuffix(s, "b")
	if s == "" {
		return 0, fmt.Errorf("empty size")
	}
	mult := int64(1)
	if u, ok := units[s[len(s)-1:]]; ok {
		mult, s = u, s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	return n * mult, nil
}

// healthURL is the URL of a health check that runs curl or wget.
func healthURL(t *testing.T, name string, h *composeHealth) *url.URL {
	t.Helper()
	for _, w := range h.Test {
		if strings.HasPrefix(w, "http://") {
			u, err := url.Parse(w)
			if err != nil {
				t.Fatalf("service %s: health check URL %q: %v", name, w, err)
			}
			return u
		}
	}
	t.Fatalf("service %s: health check %q has no URL", name, h.Test)
	return nil
}

var wantServices = []string{"api", "dashboard", "grafana", "prometheus", "redis", "redis-exporter", "worker"}

func TestCompose(t *testing.T) {
	raw := string(readFile(t, "docker-compose.yml"))
	c := loadCompose(t)

	t.Run("Services", func(t *testing.T) {
		var got []string
		for name := range c.Services {
			got = append(got, name)
		}
		slices.Sort(got)
		if !slices.Equal(got, wantServices) {
			t.Errorf("services %q, want %q", got, wantServices)
		}
		// Debian's docker-compose 1.29 rejects a top-level name; both read .env.
		if c.Name != "" {
			t.Error("a top-level name: docker-compose 1.29 rejects it; set COMPOSE_PROJECT_NAME in .env")
		}
		if !strings.Contains(string(readFile(t, ".env")), "\nCOMPOSE_PROJECT_NAME=redlite\n") {
			t.Error(".env does not set COMPOSE_PROJECT_NAME=redlite: volume names would follow the checkout's directory name, and renaming it would orphan Redis's data")
		}
	})

	t.Run("NoComposeTimeInterpolation", func(t *testing.T) {
		// Secrets come from the env files in the container, at run time; a single $
		// would make compose substitute from the operator's shell instead.
		for n, line := range strings.Split(raw, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			if strings.Contains(strings.ReplaceAll(line, "$$", ""), "$") {
				t.Errorf("docker-compose.yml:%d: unescaped $ (compose would interpolate it): %s", n+1, line)
			}
		}
	})

	t.Run("ImagesPinned", func(t *testing.T) {
		built := map[string]bool{}
		for name, s := range c.Services {
			if s.Build != nil {
				if s.Build.Context != "." || s.Build.Dockerfile != "Dockerfile" {
					t.Errorf("service %s: build %+v, want context . and Dockerfile", name, *s.Build)
				}
				built[s.Image] = true
				continue
			}
			if !imagePin.MatchString(s.Image) {
				t.Errorf("service %s: image %q is not pinned to an exact version (name:1.2.3[-variant][@sha256:…])", name, s.Image)
			}
		}
		if len(built) != 1 {
			t.Errorf("the services built from this repository name %d images (%v); want one image for worker, dashboard and api", len(built), built)
		}
	})

	t.Run("Healthchecks", func(t *testing.T) {
		for name, s := range c.Services {
			h := s.Healthcheck
			if h == nil || len(h.Test) < 2 {
				t.Errorf("service %s: no health check", name)
				continue
			}
			if h.Test[0] != "CMD" && h.Test[0] != "CMD-SHELL" {
				t.Errorf("service %s: health check %q must start with CMD or CMD-SHELL", name, h.Test)
			}
			for _, d := range []struct{ field, v string }{{"interval", h.Interval}, {"timeout", h.Timeout}} {
				if _, err := time.ParseDuration(d.v); err != nil {
					t.Errorf("service %s: health check %s %q: %v", name, d.field, d.v, err)
				}
			}
			if h.Retries < 1 {
				t.Errorf("service %s: health check retries %d", name, h.Retries)
			}
			if s.Restart != "unless-stopped" {
				t.Errorf("service %s: restart %q, want unless-stopped", name, s.Restart)
			}
			for dep, d := range s.DependsOn {
				if c.Services[dep] == nil {
					t.Errorf("service %s depends on unknown service %s", name, dep)
				} else if d.Condition != "service_healthy" {
					t.Errorf("service %s: depends on %s with condition %q, want service_healthy", name, dep, d.Condition)
				}
			}
		}
	})

	t.Run("Volumes", func(t *testing.T) {
		used := map[string]bool{}
		for name, s := range c.Services {
			for _, m := range s.mounts(t) {
				if !m.bind {
					if _, ok := c.Volumes[m.source]; !ok {
						t.Errorf("service %s mounts volume %q, which the top-level volumes do not declare", name, m.source)
					}
					used[m.source] = true
					continue
				}
				if !m.readOnly {
					t.Errorf("service %s: bind mount %s:%s must be read-only (:ro)", name, m.source, m.target)
				}
				if strings.HasPrefix(m.source, "./ops/") {
					if _, err := os.Stat(repoPath(m.source)); err != nil {
						t.Errorf("service %s mounts %s: %v", name, m.source, err)
					}
				}
			}
		}
		for v := range c.Volumes {
			if !used[v] {
				t.Errorf("volume %s is declared and never mounted", v)
			}
		}
		// State that must outlive the containers lives in named volumes.
		for _, w := range []struct{ service, target string }{
			{"redis", "/data"}, {"prometheus", "/prometheus"}, {"grafana", "/var/lib/grafana"},
		} {
			if !slices.ContainsFunc(c.service(t, w.service).mounts(t), func(m mount) bool { return !m.bind && m.target == w.target }) {
				t.Errorf("service %s: %s is not on a named volume", w.service, w.target)
			}
		}
	})

	t.Run("NoLoginServicesOnLoopback", func(t *testing.T) {
		// asynqmon and Prometheus have no authentication.
		for _, name := range []string{"dashboard", "prometheus"} {
			for _, p := range c.service(t, name).Ports {
				if !strings.HasPrefix(p, "127.0.0.1:") {
					t.Errorf("service %s publishes %q beyond loopback; it has no login", name, p)
				}
			}
		}
	})

	t.Run("LoopbackByDefault", func(t *testing.T) {
		// Nothing on the LAN unless docker-compose.lan.yml is added.
		for name, s := range c.Services {
			for _, p := range s.Ports {
				if !strings.HasPrefix(p, "127.0.0.1:") {
					t.Errorf("service %s publishes %q beyond loopback", name, p)
				}
			}
		}
	})

	t.Run("LANOverrideIsTLS", func(t *testing.T) {
		var lan composeFile
		dec := yaml.NewDecoder(bytes.NewReader(readFile(t, "docker-compose.lan.yml")))
		dec.KnownFields(true)
		if err := dec.Decode(&lan); err != nil {
			t.Fatalf("docker-compose.lan.yml: %v", err)
		}
		for name, s := range lan.Services {
			if c.Services[name] == nil {
				t.Errorf("docker-compose.lan.yml overrides unknown service %s", name)
			}
			for _, p := range s.Ports {
				if strings.HasPrefix(p, "127.0.0.1:") {
					continue
				}
				if name != "redis" || p != "6380:6380" {
					t.Errorf("docker-compose.lan.yml: service %s publishes %q on the LAN; only Redis's TLS port 6380 may be", name, p)
				}
			}
		}
		r := lan.Services["redis"]
		if r == nil {
			t.Fatal("docker-compose.lan.yml does not publish Redis")
		}
		script := shellScript(t, "redis", r)
		for _, want := range []string{"--tls-port 6380", "--tls-auth-clients yes", "--tls-ca-cert-file /tls/ca.pem", "--requirepass"} {
			if !strings.Contains(script, want) {
				t.Errorf("the LAN Redis command %q lacks %s", script, want)
			}
		}
		if !slices.ContainsFunc(r.mounts(t), func(m mount) bool { return m.bind && m.target == "/tls" && m.readOnly }) {
			t.Error("the LAN Redis does not mount its certificates read-only at /tls")
		}
	})

	t.Run("EachServiceOnlyItsSecrets", func(t *testing.T) {
		redisEnv, grafanaEnv := envExample(t, "ops/redis.env"), envExample(t, "ops/grafana.env")
		if redisEnv["REDIS_PASSWORD"] == "" || grafanaEnv["GF_SECURITY_ADMIN_PASSWORD"] == "" {
			t.Error("the env file examples do not set REDIS_PASSWORD and GF_SECURITY_ADMIN_PASSWORD")
		}
		want := map[string][]string{
			"redis": {"ops/redis.env"}, "redis-exporter": {"ops/redis.env"}, "dashboard": {"ops/redis.env"},
			"worker": {"ops/redis.env", "ops/worker.env"}, "grafana": {"ops/grafana.env"}, "prometheus": nil,
			"api": {"ops/redis.env", "ops/api.env"},
		}
		for name, files := range want {
			if got := c.service(t, name).EnvFiles; !slices.Equal([]string(got), files) {
				t.Errorf("service %s: env_file %q, want %q", name, got, files)
			}
		}
		for name, s := range c.Services {
			env := containerEnv(t, s)
			if _, ok := env["GF_SECURITY_ADMIN_PASSWORD"]; ok && name != "grafana" {
				t.Errorf("service %s gets Grafana's admin password", name)
			}
			if _, ok := env["REDIS_PASSWORD"]; ok && name == "grafana" {
				t.Error("Grafana gets the Redis password")
			}
			for k := range s.Environment {
				if strings.Contains(k, "PASSWORD") {
					t.Errorf("service %s sets %s in docker-compose.yml; secrets belong in its env file", name, k)
				}
			}
		}
		ignore := string(readFile(t, "ops", ".gitignore"))
		for _, f := range []string{"/redis.env\n", "/grafana.env\n", "/worker.env\n", "/api.env\n"} {
			if !strings.Contains(ignore, f) {
				t.Errorf("ops/.gitignore does not ignore %s", strings.TrimSpace(f))
			}
		}
	})

	t.Run("Worker", func(t *testing.T) {
		w := c.service(t, "worker")
		env := containerEnv(t, w)
		got, program, err := execEnv(t, "worker", w, env)
		if err != nil {
			t.Fatalf("the worker's command fails in sh: %v", err)
		}
		if !slices.Equal(program, []string{"redlited"}) {
			t.Errorf("the worker runs %q, want redlited", program)
		}
		checkDaemonEnv(t, "docker-compose.yml worker", got)
		u, err := redisx.Parse(got["REDLITE_REDIS_URL"])
		if err != nil {
			t.Fatalf("REDLITE_REDIS_URL: %v", err)
		}
		if u.Addr != "redis:6379" || u.Password != env["REDIS_PASSWORD"] {
			t.Errorf("REDLITE_REDIS_URL reaches %s with password %q; want redis:6379 with REDIS_PASSWORD", u.Addr, u.Password)
		}
		// Without a password the worker must not start (and so not talk to an open Redis).
		noPass := containerEnv(t, w)
		noPass["REDIS_PASSWORD"] = ""
		if _, _, err := execEnv(t, "worker", w, noPass); err == nil || !strings.Contains(err.Error(), "REDIS_PASSWORD") {
			t.Errorf("with REDIS_PASSWORD empty the worker's command ran (err %v); want it to stop naming REDIS_PASSWORD", err)
		}

		// The model is mounted read-only and REDLITE_MODEL, when set, is under it.
		if !slices.ContainsFunc(w.mounts(t), func(m mount) bool { return m.bind && m.target == "/models" && m.readOnly }) {
			t.Error("the worker does not mount /models read-only")
		}
		if m := got["REDLITE_MODEL"]; m != "" && !strings.HasPrefix(m, "/models/") {
			t.Errorf("REDLITE_MODEL %q is not under the /models mount", m)
		}
		// Shutdown: compose must wait longer than the daemon drains.
		grace, err := time.ParseDuration(w.StopGracePeriod)
		if err != nil {
			t.Fatalf("stop_grace_period: %v", err)
		}
		drain, err := time.ParseDuration(got["REDLITE_SHUTDOWN_TIMEOUT"])
		if err != nil {
			t.Fatalf("REDLITE_SHUTDOWN_TIMEOUT: %v", err)
		}
		if grace < drain+15*time.Second {
			t.Errorf("stop_grace_period %v leaves less than 15 s beyond REDLITE_SHUTDOWN_TIMEOUT %v: Docker would SIGKILL a draining worker", grace, drain)
		}
		// Memory: the planner's limit must fit the container's.
		memLimit, err := parseBytes(w.MemLimit)
		if err != nil {
			t.Fatalf("mem_limit %q: %v", w.MemLimit, err)
		}
		limitMiB, err := strconv.ParseInt(got["REDLITE_GPU_LIMIT_MIB"], 10, 64)
		if err != nil || limitMiB <= 0 {
			t.Fatalf("REDLITE_GPU_LIMIT_MIB %q: set it; in a container the kernel reports the host's RAM", got["REDLITE_GPU_LIMIT_MIB"])
		}
		if limitMiB<<20 > memLimit-(1<<30) {
			t.Errorf("REDLITE_GPU_LIMIT_MIB %d MiB leaves less than 1 GiB of mem_limit %s", limitMiB, w.MemLimit)
		}
		// The health check asks the daemon's port (the path is checked on a live daemon).
		hu := healthURL(t, "worker", w.Healthcheck)
		if hu.Port() != portOf(t, got["REDLITE_HTTP_ADDR"]) || hu.Path != "/healthz" {
			t.Errorf("worker health check %s does not ask /healthz on REDLITE_HTTP_ADDR %s", hu, got["REDLITE_HTTP_ADDR"])
		}
		if dep, ok := w.DependsOn["redis"]; !ok || dep.Condition != "service_healthy" {
			t.Error("the worker does not wait for a healthy Redis")
		}
	})

	t.Run("API", func(t *testing.T) {
		a := c.service(t, "api")
		got, program, err := execEnv(t, "api", a, containerEnv(t, a))
		if err != nil {
			t.Fatalf("the API's command fails in sh: %v", err)
		}
		if !slices.Equal(program, []string{"redlite-api"}) {
			t.Errorf("the api service runs %q, want redlite-api", program)
		}
		// The configuration the API reads from that environment is valid.
		var environ []string
		for k, v := range got {
			environ = append(environ, k+"="+v)
		}
		if _, err := api.ConfigFromEnv(environ); err != nil {
			t.Errorf("the api service's environment: %v", err)
		}
		port := portOf(t, got["REDLITE_API_ADDR"])
		if !slices.ContainsFunc(a.Ports, func(p string) bool { return strings.HasSuffix(p, ":"+port) }) {
			t.Errorf("ports %q do not publish the API's port %s", a.Ports, port)
		}
		if hu := healthURL(t, "api", a.Healthcheck); hu.Port() != port || hu.Path != "/readyz" {
			t.Errorf("api health check %s is not /readyz on its port %s", hu, port)
		}
	})

	t.Run("Dashboard", func(t *testing.T) {
		d := c.service(t, "dashboard")
		got, program, err := execEnv(t, "dashboard", d, containerEnv(t, d))
		if err != nil {
			t.Fatalf("the dashboard's command fails in sh: %v", err)
		}
		if len(program) < 2 || program[0] != "redlite" || program[1] != "dashboard" {
			t.Fatalf("the dashboard runs %q, want redlite dashboard", program)
		}
		if _, err := redisx.Parse(got["REDLITE_REDIS_URL"]); err != nil {
			t.Errorf("REDLITE_REDIS_URL: %v", err)
		}
		i := slices.Index(program, "--addr")
		if i < 0 || i+1 >= len(program) {
			t.Fatalf("redlite dashboard %q has no --addr; its default listens on loopback only, unreachable from outside the container", program)
		}
		port := portOf(t, program[i+1])
		if !slices.ContainsFunc(d.Ports, func(p string) bool { return strings.HasSuffix(p, ":"+port) }) {
			t.Errorf("ports %q do not publish the dashboard's port %s", d.Ports, port)
		}
		if hu := healthURL(t, "dashboard", d.Healthcheck); hu.Port() != port {
			t.Errorf("dashboard health check %s is not on its port %s", hu, port)
		}
	})

	t.Run("Prometheus", func(t *testing.T) {
		p := c.service(t, "prometheus")
		var cfgPath string
		for _, a := range p.Command {
			if v, ok := strings.CutPrefix(a, "--config.file="); ok {
				cfgPath = v
			}
		}
		host, ok := p.hostPath(t, cfgPath)
		if !ok {
			t.Fatalf("--config.file=%s is not in a bind mount", cfgPath)
		}
		if host != repoPath("ops", "prometheus", "prometheus.yml") {
			t.Errorf("--config.file=%s is %s, want ops/prometheus/prometheus.yml", cfgPath, host)
		}
		// The scrape job finds the compose workers by service name, on the daemon's port.
		cfg := loadPrometheusConfig(t)
		workerPort := containerEnv(t, c.service(t, "worker"))["REDLITE_HTTP_ADDR"]
		job := cfg.job(t, "redlited")
		if !slices.ContainsFunc(job.DNSSD, func(d dnsSD) bool {
			return slices.Contains(d.Names, "worker") && strconv.Itoa(d.Port) == portOf(t, workerPort)
		}) {
			t.Errorf("job redlited does not discover service worker on port %s by DNS", portOf(t, workerPort))
		}
		if len(job.FileSD) == 0 {
			t.Error("job redlited has no file_sd_configs for workers outside compose")
		}
		apiPort := portOf(t, containerEnv(t, c.service(t, "api"))["REDLITE_API_ADDR"])
		if !slices.ContainsFunc(cfg.job(t, "redlite-api").DNSSD, func(d dnsSD) bool {
			return slices.Contains(d.Names, "api") && strconv.Itoa(d.Port) == apiPort
		}) {
			t.Errorf("job redlite-api does not discover service api on port %s by DNS", apiPort)
		}
	})

	t.Run("Grafana", func(t *testing.T) {
		g := c.service(t, "grafana")
		if host, ok := g.hostPath(t, "/etc/grafana/provisioning"); !ok || host != repoPath("ops", "grafana", "provisioning") {
			t.Errorf("/etc/grafana/provisioning is %q, want ops/grafana/provisioning", host)
		}
		prov := loadDashboardProvider(t)
		host, ok := g.hostPath(t, prov.Options.Path)
		if !ok || host != repoPath("ops", "grafana", "dashboards") {
			t.Errorf("the dashboard provider reads %s, which the grafana service maps to %q, want ops/grafana/dashboards", prov.Options.Path, host)
		}
		home := g.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
		if hp, ok := g.hostPath(t, home); !ok {
			t.Errorf("the home dashboard %s is not mounted", home)
		} else if _, err := os.Stat(hp); err != nil {
			t.Errorf("the home dashboard %s: %v", home, err)
		}
		ds := loadDatasource(t)
		u, err := url.Parse(ds.URL)
		if err != nil {
			t.Fatal(err)
		}
		if c.Services[u.Hostname()] == nil {
			t.Errorf("the datasource URL %s names no compose service", ds.URL)
		}
		if ph := healthURL(t, "prometheus", c.service(t, "prometheus").Healthcheck); ph.Port() != u.Port() {
			t.Errorf("the datasource asks port %s, Prometheus serves %s", u.Port(), ph.Port())
		}
	})

	t.Run("Redis", func(t *testing.T) {
		r := c.service(t, "redis")
		script := shellScript(t, "redis", r)
		conf := regexp.MustCompile(`redis-server (\S+)`).FindStringSubmatch(script)
		if conf == nil {
			t.Fatalf("redis command %q does not start redis-server with a file", script)
		}
		host, ok := r.hostPath(t, conf[1])
		if !ok || host != repoPath("ops", "redis", "redis.conf") {
			t.Fatalf("redis-server reads %s, mounted from %q; want ops/redis/redis.conf", conf[1], host)
		}
		if r.User == "" || r.User == "root" || r.User == "0" {
			t.Errorf("redis runs as %q: the image's entrypoint drops root only when it starts redis-server itself", r.User)
		}
		maxmem, err := parseBytes(redisDirective(t, "maxmemory"))
		if err != nil {
			t.Fatal(err)
		}
		limit, err := parseBytes(r.MemLimit)
		if err != nil {
			t.Fatalf("mem_limit %q: %v", r.MemLimit, err)
		}
		if limit < maxmem+maxmem/2 {
			t.Errorf("mem_limit %s leaves too little beyond maxmemory %d bytes for the AOF-rewrite fork", r.MemLimit, maxmem)
		}
		startComposeRedis(t, r, script, conf[1], host)
	})

	t.Run("DockerComposeConfig", func(t *testing.T) {
		// Debian's docker-compose (v1) validates the file against its Compose schema without
		// an engine. It rejects a top-level name (TestCompose/Services keeps it out).
		bin, err := exec.LookPath("docker-compose")
		if err != nil {
			t.Skip("docker-compose not on PATH; the schema check runs where it is (apt-get install docker-compose)")
		}
		dir := t.TempDir()
		copyTree(t, repoPath("ops"), filepath.Join(dir, "ops"), nil)
		writeFile(t, filepath.Join(dir, "docker-compose.yml"), raw)
		writeFile(t, filepath.Join(dir, "Dockerfile"), string(readFile(t, "Dockerfile")))
		for _, f := range []string{"redis", "grafana", "worker", "api"} {
			writeFile(t, filepath.Join(dir, "ops", f+".env"), string(readFile(t, "ops", f+".env.example")))
		}
		writeFile(t, filepath.Join(dir, "docker-compose.lan.yml"), string(readFile(t, "docker-compose.lan.yml")))
		writeFile(t, filepath.Join(dir, ".env"), string(readFile(t, ".env")))
		cmd := exec.Command(bin, "--project-directory", dir, "-f", filepath.Join(dir, "docker-compose.yml"), "config", "--quiet")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("docker-compose config: %v\n%s", err, out)
		}
		// With the LAN override merged in.
		cmd = exec.Command(bin, "--project-directory", dir, "-f", filepath.Join(dir, "docker-compose.yml"),
			"-f", filepath.Join(dir, "docker-compose.lan.yml"), "config", "--quiet")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("docker-compose config with docker-compose.lan.yml: %v\n%s", err, out)
		}
		// With the Sentinel layer (ops/compose.sentinel.yml is copied with ops/).
		cmd = exec.Command(bin, "--project-directory", dir, "-f", filepath.Join(dir, "docker-compose.yml"),
			"-f", filepath.Join(dir, "ops", "compose.sentinel.yml"), "--profile", "sentinel", "config", "--quiet")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("docker-compose config with ops/compose.sentinel.yml: %v\n%s", err, out)
		}
	})
}

// redisDirective is the value of a directive in ops/redis/redis.conf.
func redisDirective(t *testing.T, name string) string {
	t.Helper()
	for _, line := range strings.Split(string(readFile(t, "ops", "redis", "redis.conf")), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == name {
			return strings.Join(f[1:], " ")
		}
	}
	t.Fatalf("ops/redis/redis.conf has no %s", name)
	return ""
}

// startComposeRedis runs the redis service's own command with a local redis-server, the
// repository's redis.conf in place of the mounted one and a free port and directory
// appended, then checks what Redis reports and that the service's health check passes.
func startComposeRedis(t *testing.T, r *composeService, script, confInContainer, confHost string) {
	needTool(t, "redis-server", "apt-get install redis-server")
	cli := needTool(t, "redis-cli", "apt-get install redis-tools")
	port := freePort(t)
	dir := t.TempDir()
	confHost, err := filepath.Abs(confHost)
	if err != nil {
		t.Fatal(err)
	}
	script = strings.Replace(script, confInContainer, confHost, 1) +
		fmt.Sprintf(" --port %d --bind 127.0.0.1 --dir %s --daemonize no", port, dir)
	const password = "test-password-0123"
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "REDIS_PASSWORD=" + password}
	var logb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logb, &logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Password: password})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("redis-server with ops/redis/redis.conf exited: %v\n%s", waitErr, logb.String())
		case <-ctx.Done():
			t.Fatalf("redis-server did not answer: %v\n%s", err, logb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	want := map[string]string{
		"appendonly":       "yes",
		"maxmemory-policy": "noeviction",
		"appendfsync":      "everysec",
	}
	for k, v := range want {
		got, err := rdb.ConfigGet(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got[k] != v {
			t.Errorf("redis reports %s %q, want %q", k, got[k], v)
		}
	}
	if got, _ := rdb.ConfigGet(ctx, "maxmemory").Result(); got["maxmemory"] == "0" {
		t.Error("maxmemory is 0 (unbounded): Redis would grow until the container is killed")
	}
	// Without the password Redis refuses commands.
	open := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	defer open.Close()
	if err := open.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without the password: %v, want NOAUTH", err)
	}
	// The health check, pointed at this port.
	h := r.Healthcheck
	if h.Test[0] != "CMD-SHELL" || len(h.Test) != 2 {
		t.Fatalf("redis health check %q: want [CMD-SHELL script]", h.Test)
	}
	check := strings.Replace(unescape(h.Test[1]), "redis-cli", fmt.Sprintf("%s -p %d", cli, port), 1)
	if _, err := runShell(t, check, map[string]string{"REDIS_PASSWORD": password}); err != nil {
		t.Errorf("the redis health check fails against a healthy Redis: %v", err)
	}
	if _, err := runShell(t, check, map[string]string{"REDIS_PASSWORD": "wrong"}); err == nil {
		t.Error("the redis health check passes with a wrong password")
	}
}
