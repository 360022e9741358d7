package layout

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeLimit keeps the front door a front door: internals live beside their packages and
// in docs/.
const readmeLimit = 10 * 1024

// TestREADME checks the front door: its size, that every path of its layout table exists,
// and that every command its code blocks run names a binary and subcommand we have.
func TestREADME(t *testing.T) {
	b := readRepo(t, "README.md")
	if len(b) >= readmeLimit {
		t.Errorf("README.md is %d bytes; keep it under %d (move detail to docs/ or a package README)", len(b), readmeLimit)
	}
	text := string(b)

	t.Run("LayoutPaths", func(t *testing.T) {
		n := 0
		for _, line := range strings.Split(text, "\n") {
			if !strings.HasPrefix(line, "| `") {
				continue
			}
			cell := strings.Split(line, "|")[1]
			for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cell, -1) {
				n++
				if _, err := os.Stat(filepath.Join("../..", m[1])); err != nil {
					t.Errorf("README layout names %s: %v", m[1], err)
				}
			}
		}
		if n < 8 {
			t.Errorf("found %d paths in the README's layout table; the table's shape changed?", n)
		}
	})

	t.Run("Commands", func(t *testing.T) {
		subs := cliCommands(t)
		n := 0
		for _, block := range codeBlocks(text) {
			for _, line := range strings.Split(block, "\n") {
				// Command substitutions ($(openssl rand …)) are values, not commands.
				plain := regexp.MustCompile(`\$\([^)]*\)`).ReplaceAllString(line, "x")
				if strings.HasPrefix(strings.TrimSpace(plain), "#") {
					continue
				}
				f := strings.Fields(strings.SplitN(plain, " #", 2)[0])
				// Leading VAR=value assignments are the environment, not the command.
				for len(f) > 0 && strings.Contains(f[0], "=") {
					f = f[1:]
				}
				if len(f) > 0 && f[len(f)-1] == "&" {
					f = f[:len(f)-1]
				}
				if len(f) == 0 || f[0] == "export" {
					continue
				}
				n++
				switch {
				case f[0] == "go" && len(f) > 2 && (f[1] == "run" || f[1] == "install"):
					for _, pkg := range f[2:] {
						if !strings.HasPrefix(pkg, "./") {
							break
						}
						if _, err := os.Stat(filepath.Join("../..", pkg)); err != nil {
							t.Errorf("README runs %q: %v", line, err)
						}
						if f[1] == "run" && filepath.Base(pkg) == "redlite" && len(f) > 3 && !slices.Contains(subs, f[3]) {
							t.Errorf("README runs %q: redlite has no command %q", line, f[3])
						}
					}
				case f[0] == "go" && len(f) > 1 && f[1] == "test":
				case f[0] == "redlite":
					if len(f) < 2 || !slices.Contains(subs, f[1]) {
						t.Errorf("README runs %q: redlite has no such command (it has %v)", line, subs)
					}
				case f[0] == "redlited" || f[0] == "redlite-api":
					if _, err := os.Stat(filepath.Join("../../cmd", f[0])); err != nil {
						t.Errorf("README runs %q: %v", line, err)
					}
				default:
					t.Errorf("README runs %q: not a command this test knows how to check", line)
				}
			}
		}
		if n < 4 {
			t.Errorf("found %d commands in the README; the code blocks' shape changed?", n)
		}
	})
}

// TestDocLinks checks that every relative link of the README, docs/ and the package
// READMEs reaches a file or directory of the repository.
func TestDocLinks(t *testing.T) {
	var files []string
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if regexp.MustCompile(`^(https?:|mailto:|#)`).MatchString(target) {
				continue
			}
			target = strings.SplitN(target, "#", 2)[0]
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				rel, _ := filepath.Rel("../..", f)
				t.Errorf("%s links %s, which does not exist", rel, m[1])
			}
		}
	}
}

func readRepo(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../..", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// codeBlocks returns the bodies of the ```sh blocks of a Markdown text.
func codeBlocks(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// cliCommands lists redlite's subcommands as cmd/redlite registers them.
func cliCommands(t *testing.T) []string {
	t.Helper()
	srcs, err := filepath.Glob("../../cmd/redlite/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	re := regexp.MustCompile(`register\(command\{name: "([^"]+)"`)
	for _, s := range srcs {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			names = append(names, m[1])
		}
	}
	if len(names) == 0 {
		t.Fatal("found no command registrations in cmd/redlite")
	}
	return names
}
