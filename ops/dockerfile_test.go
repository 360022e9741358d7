package ops

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case: FROM, RUN, …
	args string
}

func parseDockerfile(t *testing.T, src []byte) []instruction {
	t.Helper()
	var out []instruction
	var cur *instruction
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur == nil && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur != nil && strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		cont := strings.HasSuffix(trimmed, "\\")
		trimmed = strings.TrimSuffix(trimmed, "\\")
		if cur == nil {
			cmd, args, _ := strings.Cut(trimmed, " ")
			cur = &instruction{line: n, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		} else {
			cur.args += " " + strings.TrimSpace(trimmed)
		}
		if !cont {
			cur.args = strings.Join(strings.Fields(cur.args), " ")
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		t.Fatalf("Dockerfile:%d: the last instruction ends in a line continuation", cur.line)
	}
	return out
}

// stage is one FROM and what follows it.
type stage struct {
	image, name string
	body        []instruction
}

func dockerStages(t *testing.T, ins []instruction) []stage {
	t.Helper()
	var stages []stage
	for _, in := range ins {
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("Dockerfile:%d: %s before the first FROM", in.line, in.cmd)
			}
			continue
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
	}
	return stages
}

func (s stage) find(cmd string) []instruction {
	var out []instruction
	for _, in := range s.body {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// dockerignore implements .dockerignore's matching: patterns relative to the context root
// (a leading / is dropped), * and ? within a path element, ** across elements, ! to
// re-include, the last matching pattern wins, and a pattern that matches a directory
// matches everything in it.
type dockerignore struct {
	patterns []*regexp.Regexp
	negate   []bool
}

func parseDockerignore(t *testing.T, src []byte) *dockerignore {
	t.Helper()
	d := &dockerignore{}
	for _, line := range strings.Split(string(src), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		neg := strings.HasPrefix(line, "!")
		line = path.Clean(strings.TrimPrefix(strings.TrimPrefix(line, "!"), "/"))
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("$")
		d.patterns = append(d.patterns, regexp.MustCompile(re.String()))
		d.negate = append(d.negate, neg)
	}
	return d
}

// ignored reports whether rel (slash-separated, relative to the context) is left out.
func (d *dockerignore) ignored(rel string) bool {
	out := false
	for i, re := range d.patterns {
		// The path or any of its parent directories.
		for p := rel; p != "." && p != "/" && p != ""; p = path.Dir(p) {
			if re.MatchString(p) {
				out = !d.negate[i]
				break
			}
		}
	}
	return out
}

func TestDockerignore(t *testing.T) {
	ig := parseDockerignore(t, readFile(t, ".dockerignore"))
	for _, p := range []string{".git/HEAD", "models/x.gguf", "engine/testdata/tiny.gguf", "x.gguf",
		"redlite", "quant.test", "engine/cpu/cpu.test", "ops/redis.env", "ops/grafana.env", "ops/api.env", ".ci/run",
		"api/testdata/node/node_modules/openai/package.json"} {
		if !ig.ignored(p) {
			t.Errorf("%s goes into the build context", p)
		}
	}
	for _, p := range []string{"go.mod", "go.sum", "cmd/redlited/main.go", "cmd/redlite/main.go",
		"daemon/daemon.go", "engine/gguf/reader.go", "ops/redis.env.example", "cmd/redlite/synth.go"} {
		if ig.ignored(p) {
			t.Errorf("%s is left out of the build context", p)
		}
	}
	// The matcher itself: negation and **.
	m := parseDockerignore(t, []byte("docs\n!docs/keep.md\n**/*.bin\n"))
	for p, want := range map[string]bool{"docs/a.md": true, "docs/keep.md": false, "a/b/c.bin": true, "c.bin": true, "docsx": false} {
		if got := m.ignored(p); got != want {
			t.Errorf("matcher: ignored(%q) = %v, want %v", p, got, want)
		}
	}
}

var goBuildPackages = regexp.MustCompile(`(?:^|\s)(\./cmd/[a-z0-9_/-]+)`)

func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t, readFile(t, "Dockerfile"))
	stages := dockerStages(t, ins)
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a runtime stage", len(stages))
	}
	for _, s := range stages {
		if !imagePin.MatchString(s.image) {
			t.Errorf("FROM %s is not pinned to an exact version", s.image)
		}
	}
	build, runtime := stages[0], stages[len(stages)-1]
	if build.name == "" || !strings.HasPrefix(build.image, "golang:") {
		t.Errorf("the first stage is FROM %s AS %q, want a named golang build stage", build.image, build.name)
	}
	if strings.HasPrefix(runtime.image, "golang:") || !strings.Contains(runtime.image, "slim") {
		t.Errorf("the runtime stage is FROM %s, want a slim image without the toolchain", runtime.image)
	}

	// The runtime stage: binaries from the build stage, a non-root user, a health check on
	// the daemon's /healthz, the port it serves, no model inside.
	copied := false
	for _, in := range runtime.find("COPY") {
		if strings.Contains(in.args, "--from="+build.name) {
			copied = true
		}
		if strings.Contains(in.args, ".gguf") {
			t.Errorf("Dockerfile:%d copies a model into the image; models are mounted", in.line)
		}
	}
	if !copied {
		t.Errorf("the runtime stage copies nothing from stage %q", build.name)
	}
	users := runtime.find("USER")
	if len(users) == 0 {
		t.Fatal("the runtime stage runs as root: no USER")
	}
	if u := strings.Split(users[len(users)-1].args, ":")[0]; u == "root" || u == "0" {
		t.Errorf("USER %s is root", users[len(users)-1].args)
	}
	env := map[string]string{}
	for _, in := range runtime.find("ENV") {
		for _, kv := range strings.Fields(in.args) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	}
	checkDaemonEnv(t, "Dockerfile ENV", env)
	port := portOf(t, env["REDLITE_HTTP_ADDR"])
	hc := runtime.find("HEALTHCHECK")
	if len(hc) != 1 || !strings.Contains(hc[0].args, "127.0.0.1:"+port+"/healthz") {
		t.Errorf("HEALTHCHECK %v does not ask /healthz on port %s (REDLITE_HTTP_ADDR)", hc, port)
	}
	if ex := runtime.find("EXPOSE"); len(ex) != 1 || ex[0].args != port {
		t.Errorf("EXPOSE %v, want %s", ex, port)
	}
	if c := runtime.find("CMD"); len(c) != 1 || c[0].args != `["redlited"]` {
		t.Errorf("CMD %v, want [\"redlited\"] (exec form: redlited is PID 1 and gets SIGTERM)", c)
	}

	// The build step: run it here, on the context .dockerignore leaves.
	var buildRun string
	for _, in := range build.find("RUN") {
		if strings.Contains(in.args, "go build") {
			buildRun = in.args
		}
	}
	if !strings.Contains(buildRun, "CGO_ENABLED=0") {
		t.Fatalf("the go build step %q does not set CGO_ENABLED=0 for a static binary", buildRun)
	}
	var pkgs []string
	for _, m := range goBuildPackages.FindAllStringSubmatch(buildRun, -1) {
		pkgs = append(pkgs, m[1])
	}
	for _, want := range []string{"./cmd/redlited", "./cmd/redlite", "./cmd/redlite-api"} {
		if !strings.Contains(" "+strings.Join(pkgs, " ")+" ", " "+want+" ") {
			t.Errorf("the build step %q does not build %s", buildRun, want)
		}
	}
	t.Run("BuildsFromContext", func(t *testing.T) {
		if testing.Short() {
			t.Skip("builds the image's binaries; skipped with -short")
		}
		ig := parseDockerignore(t, readFile(t, ".dockerignore"))
		ctx := t.TempDir()
		copyTree(t, repoPath(), ctx, func(rel string, _ bool) bool { return ig.ignored(rel) })
		out := t.TempDir()
		args := append([]string{"build", "-trimpath", "-buildvcs=false", "-o", out + string(filepath.Separator)}, pkgs...)
		cmd := exec.Command("go", args...)
		cmd.Dir = ctx
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=-mod=readonly")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s in the build context: %v\n%s", strings.Join(args, " "), err, b)
		}
		for _, p := range pkgs {
			if _, err := os.Stat(filepath.Join(out, path.Base(p))); err != nil {
				t.Errorf("the build made no %s: %v", path.Base(p), err)
			}
		}
	})
}
