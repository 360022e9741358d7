package main

import (
	"strings"
	"testing"

	"github.com/redlite/batch/internal/redistest"
)

// TestNoCredentialsPrinted: with a password in $REDLITE_REDIS_URL, no command's help text,
// and no error, repeats it.
func TestNoCredentialsPrinted(t *testing.T) {
	const secret = "pa55-w0rd-xyzzy"
	r := redistest.Start(t, redistest.WithPassword("the-right-one"))
	t.Setenv("REDLITE_REDIS_URL", "redis://:"+secret+"@"+r.Addr()+"/0")
	for _, args := range [][]string{
		{"status", "-h"}, {"result", "-h"}, {"cancel", "-h"}, {"workers", "-h"}, {"dashboard", "-h"},
		{"enqueue", "generate", "-h"}, {"enqueue", "summarize", "-h"},
	} {
		code, out, errs := runCmd(t, args...)
		if code != 0 || !strings.Contains(errs, "$REDLITE_REDIS_URL") {
			t.Errorf("%v: exit %d, help %q", args, code, errs)
		}
		if strings.Contains(out+errs, secret) {
			t.Errorf("%v prints the password:\n%s%s", args, out, errs)
		}
	}
	// A wrong password: the error says so, without the password.
	code, out, errs := runCmd(t, "status", "some-job")
	if code != 1 || !strings.Contains(errs, "authentication failed") || strings.Contains(out+errs, secret) {
		t.Errorf("status with a wrong password: exit %d, %q %q", code, out, errs)
	}
	// A URL that does not parse: the error names the problem, not the password.
	code, out, errs = runCmd(t, "status", "--redis", "redis://:"+secret+"@host:99999/0", "some-job")
	if code != 2 || !strings.Contains(errs, "port") || strings.Contains(out+errs, secret) {
		t.Errorf("status with a bad URL: exit %d, %q %q", code, out, errs)
	}
}

// TestRedisTLSEnv: the CLI reads REDLITE_REDIS_CA_FILE, _CERT_FILE and _KEY_FILE.
func TestRedisTLSEnv(t *testing.T) {
	f := redistest.NewTLSFiles(t)
	r := redistest.Start(t, redistest.WithTLS(f))
	t.Setenv("REDLITE_REDIS_URL", r.TLSURL(0))
	t.Setenv("REDLITE_REDIS_CA_FILE", f.CA)
	t.Setenv("REDLITE_REDIS_CERT_FILE", f.ClientCert)
	t.Setenv("REDLITE_REDIS_KEY_FILE", f.ClientKey)
	if code, _, errs := runCmd(t, "status", "no-such-job"); code != 1 || !strings.Contains(errs, "not found") {
		t.Errorf("status over TLS: exit %d, %q; want the job not found", code, errs)
	}
	if code, out, errs := runCmd(t, "workers"); code != 0 {
		t.Errorf("workers over TLS: exit %d, %q %q", code, out, errs)
	}
	t.Setenv("REDLITE_REDIS_CA_FILE", "")
	if code, _, errs := runCmd(t, "status", "no-such-job"); code != 1 || !strings.Contains(errs, "certificate") {
		t.Errorf("status over TLS without the CA: exit %d, %q; want a certificate error", code, errs)
	}
}
