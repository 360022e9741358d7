package ops

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlite/batch/internal/redistest"
)

// plistValue is a decoded property-list value: string, int64, float64, bool, []any or
// map[string]any.
type plistValue = any

// decodePlist reads an XML property list as plutil -lint checks it: the plist root with
// version 1.0, one value in it, dicts of key/value pairs with unique keys, and only the XML
// plist element types. Errors give the byte offset.
func decodePlist(src []byte) (plistValue, error) {
	if !bytes.Contains(src, []byte(`<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN"`)) {
		return nil, errors.New("no plist DOCTYPE")
	}
	d := xml.NewDecoder(bytes.NewReader(src))
	root, err := nextStart(d)
	if err != nil {
		return nil, err
	}
	if root.Name.Local != "plist" {
		return nil, fmt.Errorf("offset %d: root element <%s>, want <plist>", d.InputOffset(), root.Name.Local)
	}
	if v := attr(root, "version"); v != "1.0" {
		return nil, fmt.Errorf("plist version %q, want 1.0", v)
	}
	start, err := nextStart(d)
	if err != nil {
		return nil, err
	}
	v, err := plistElement(d, start)
	if err != nil {
		return nil, err
	}
	if _, err := nextStart(d); err == nil {
		return nil, fmt.Errorf("offset %d: more than one value in <plist>", d.InputOffset())
	}
	return v, nil
}

func attr(se xml.StartElement, name string) string {
	for _, a := range se.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// nextStart returns the next start element, skipping text, comments and directives; an
// end element first means there is none (io.EOF).
func nextStart(d *xml.Decoder) (xml.StartElement, error) {
	for {
		tok, err := d.Token()
		if err != nil {
			return xml.StartElement{}, err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			return tok, nil
		case xml.EndElement:
			return xml.StartElement{}, io.EOF
		case xml.CharData:
			if len(bytes.TrimSpace(tok)) > 0 {
				return xml.StartElement{}, fmt.Errorf("offset %d: stray text %q", d.InputOffset(), bytes.TrimSpace(tok))
			}
		}
	}
}

func elementText(d *xml.Decoder) (string, error) {
	var b strings.Builder
	for {
		tok, err := d.Token()
		if err != nil {
			return "", err
		}
		switch tok := tok.(type) {
		case xml.CharData:
			b.Write(tok)
		case xml.EndElement:
			return b.String(), nil
		case xml.StartElement:
			return "", fmt.Errorf("offset %d: <%s> inside a text element", d.InputOffset(), tok.Name.Local)
		}
	}
}

func plistElement(d *xml.Decoder, se xml.StartElement) (plistValue, error) {
	switch se.Name.Local {
	case "string":
		return elementText(d)
	case "integer":
		s, err := elementText(d)
		if err != nil {
			return nil, err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("offset %d: <integer>%s</integer>: %v", d.InputOffset(), s, err)
		}
		return n, nil
	case "real":
		s, err := elementText(d)
		if err != nil {
			return nil, err
		}
		return strconv.ParseFloat(strings.TrimSpace(s), 64)
	case "true", "false":
		if err := d.Skip(); err != nil {
			return nil, err
		}
		return se.Name.Local == "true", nil
	case "array":
		arr := []any{}
		for {
			el, err := nextStart(d)
			if err == io.EOF {
				return arr, nil
			}
			if err != nil {
				return nil, err
			}
			v, err := plistElement(d, el)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
	case "dict":
		m := map[string]any{}
		for {
			el, err := nextStart(d)
			if err == io.EOF {
				return m, nil
			}
			if err != nil {
				return nil, err
			}
			if el.Name.Local != "key" {
				return nil, fmt.Errorf("offset %d: <%s> where a <key> belongs in <dict>", d.InputOffset(), el.Name.Local)
			}
			k, err := elementText(d)
			if err != nil {
				return nil, err
			}
			if _, dup := m[k]; dup {
				return nil, fmt.Errorf("offset %d: key %q twice in one <dict>", d.InputOffset(), k)
			}
			vel, err := nextStart(d)
			if err != nil {
				return nil, fmt.Errorf("offset %d: key %q has no value", d.InputOffset(), k)
			}
			v, err := plistElement(d, vel)
			if err != nil {
				return nil, err
			}
			m[k] = v
		}
	}
	return nil, fmt.Errorf("offset %d: <%s> is not a plist element", d.InputOffset(), se.Name.Local)
}

func TestDecodePlist(t *testing.T) {
	const head = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
`
	v, err := decodePlist([]byte(head + `<plist version="1.0"><dict><!-- c --><key>a</key><array><string>x</string><integer>3</integer><true/></array></dict></plist>`))
	if err != nil {
		t.Fatal(err)
	}
	arr := v.(map[string]any)["a"].([]any)
	if arr[0] != "x" || arr[1] != int64(3) || arr[2] != true {
		t.Errorf("decoded %#v", v)
	}
	for name, bad := range map[string]string{
		"duplicate key": `<plist version="1.0"><dict><key>a</key><true/><key>a</key><false/></dict></plist>`,
		"value no key":  `<plist version="1.0"><dict><string>a</string></dict></plist>`,
		"key no value":  `<plist version="1.0"><dict><key>a</key></dict></plist>`,
		"bad integer":   `<plist version="1.0"><integer>3s</integer></plist>`,
		"unknown type":  `<plist version="1.0"><str>a</str></plist>`,
		"unclosed":      `<plist version="1.0"><dict><key>a</key><string>x</dict></plist>`,
		"two values":    `<plist version="1.0"><true/><false/></plist>`,
	} {
		if _, err := decodePlist([]byte(head + bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func loadPlist(t *testing.T, name string) map[string]any {
	t.Helper()
	v, err := decodePlist(readFile(t, "ops", "launchd", name))
	if err != nil {
		t.Fatalf("ops/launchd/%s: %v", name, err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("ops/launchd/%s: the root value is not a dict", name)
	}
	if m["Label"] != strings.TrimSuffix(name, ".plist") {
		t.Errorf("%s: Label %v, want the file name without .plist", name, m["Label"])
	}
	return m
}

// get returns m[key] as a T, failing the test when it is missing or of another type.
func get[T any](t *testing.T, m map[string]any, key string) T {
	t.Helper()
	v, ok := m[key].(T)
	if !ok {
		var zero T
		t.Fatalf("key %s: %#v, want a %T", key, m[key], zero)
	}
	return v
}

func TestLaunchdRedlited(t *testing.T) {
	p := loadPlist(t, "com.redlite.redlited.plist")
	args := get[[]any](t, p, "ProgramArguments")
	if bin, _ := args[0].(string); !filepath.IsAbs(bin) || filepath.Base(bin) != "redlited" {
		t.Errorf("ProgramArguments[0] %q, want an absolute path to redlited", args[0])
	}
	if u := get[string](t, p, "UserName"); u == "" || u == "root" {
		t.Errorf("UserName %q: run as an unprivileged user", u)
	}
	if !get[bool](t, p, "RunAtLoad") || !get[bool](t, p, "KeepAlive") {
		t.Error("RunAtLoad and KeepAlive must be true: start at boot, restart when it exits")
	}
	if th := get[int64](t, p, "ThrottleInterval"); th < 10 {
		t.Errorf("ThrottleInterval %d s: a daemon that cannot start would spin", th)
	}
	for _, k := range []string{"StandardOutPath", "StandardErrorPath"} {
		if !filepath.IsAbs(get[string](t, p, k)) {
			t.Errorf("%s %q is not absolute", k, p[k])
		}
	}

	envAny := get[map[string]any](t, p, "EnvironmentVariables")
	env := map[string]string{}
	for k, v := range envAny {
		s, ok := v.(string)
		if !ok {
			t.Errorf("EnvironmentVariables %s is a %T; launchd wants strings", k, v)
		}
		env[k] = s
	}
	// The certificate files exist only on a Mac: check the environment with test-made ones
	// in their place (redlited reads them at start).
	checked := maps.Clone(env)
	tlsFiles := redistest.NewTLSFiles(t)
	for k, f := range map[string]string{"REDLITE_REDIS_CA_FILE": tlsFiles.CA, "REDLITE_REDIS_CERT_FILE": tlsFiles.ClientCert, "REDLITE_REDIS_KEY_FILE": tlsFiles.ClientKey} {
		if !filepath.IsAbs(env[k]) {
			t.Errorf("%s %q is not an absolute path", k, env[k])
		}
		checked[k] = f
	}
	checkDaemonEnv(t, "com.redlite.redlited.plist", checked)
	for _, k := range []string{"REDLITE_REDIS_URL", "REDLITE_MODEL", "REDLITE_HTTP_ADDR", "REDLITE_GPU_LIMIT_MIB", "REDLITE_SHUTDOWN_TIMEOUT"} {
		if env[k] == "" {
			t.Errorf("EnvironmentVariables does not set %s", k)
		}
	}
	if !filepath.IsAbs(env["REDLITE_MODEL"]) {
		t.Errorf("REDLITE_MODEL %q is not absolute", env["REDLITE_MODEL"])
	}
	// launchd sends SIGKILL ExitTimeOut seconds after SIGTERM; the daemon needs its
	// shutdown timeout plus time to stop the engine and close the HTTP server.
	drain, err := time.ParseDuration(env["REDLITE_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatal(err)
	}
	exit := time.Duration(get[int64](t, p, "ExitTimeOut")) * time.Second
	if exit < drain+15*time.Second {
		t.Errorf("ExitTimeOut %v leaves less than 15 s beyond REDLITE_SHUTDOWN_TIMEOUT %v", exit, drain)
	}

	// The planner's limit must not exceed the wired limit the other daemon sets.
	wired := wiredLimitMiB(t)
	limit, err := strconv.ParseInt(env["REDLITE_GPU_LIMIT_MIB"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if limit > wired {
		t.Errorf("REDLITE_GPU_LIMIT_MIB %d exceeds iogpu.wired_limit_mb %d", limit, wired)
	}
}

// wiredLimitMiB is the value com.redlite.wired-limit.plist gives iogpu.wired_limit_mb.
func wiredLimitMiB(t *testing.T) int64 {
	t.Helper()
	p := loadPlist(t, "com.redlite.wired-limit.plist")
	args := get[[]any](t, p, "ProgramArguments")
	if len(args) != 2 || args[0] != "/usr/sbin/sysctl" {
		t.Fatalf("ProgramArguments %q, want [/usr/sbin/sysctl iogpu.wired_limit_mb=N]", args)
	}
	v, ok := strings.CutPrefix(args[1].(string), "iogpu.wired_limit_mb=")
	if !ok {
		t.Fatalf("ProgramArguments[1] %q, want iogpu.wired_limit_mb=N", args[1])
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1024 {
		t.Fatalf("iogpu.wired_limit_mb=%s: want a size in MiB", v)
	}
	if !get[bool](t, p, "RunAtLoad") {
		t.Error("the wired limit must be set at every boot: RunAtLoad")
	}
	// Retried until it succeeds, then left alone: KeepAlive {SuccessfulExit: false}. A
	// plain KeepAlive true would rerun the one-shot sysctl forever; LaunchOnlyOnce would
	// never retry a failure.
	ka, ok := p["KeepAlive"].(map[string]any)
	if !ok || ka["SuccessfulExit"] != false || len(ka) != 1 {
		t.Errorf("KeepAlive %v, want {SuccessfulExit: false}: rerun the sysctl only when it fails", p["KeepAlive"])
	}
	if _, ok := p["LaunchOnlyOnce"]; ok {
		t.Error("LaunchOnlyOnce would keep launchd from retrying a failed sysctl")
	}
	if ti, ok := p["ThrottleInterval"].(int64); !ok || ti < 10 {
		t.Errorf("ThrottleInterval %v, want ≥ 10 s between retries", p["ThrottleInterval"])
	}
	return n
}

func TestLaunchdWiredLimit(t *testing.T) {
	wiredLimitMiB(t)
}
