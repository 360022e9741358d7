package jobs

import (
	"context"
	"strings"
	"testing"

	"github.com/redlite/batch/internal/redistest"
)

// TestRedisTLS connects to a real redis-server over TLS with a CA made in the test and a
// client certificate, as REDLITE_REDIS_CA_FILE, _CERT_FILE and _KEY_FILE configure.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	f := redistest.NewTLSFiles(t)
	srv := redistest.Start(t, redistest.WithTLS(f))
	url := srv.TLSURL(0)
	ping := func(files TLSFiles) error {
		c, err := NewClient(url, WithTLSFiles(files))
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Ping(context.Background())
	}
	if err := ping(TLSFiles{CA: f.CA, Cert: f.ClientCert, Key: f.ClientKey}); err != nil {
		t.Fatalf("private CA and client certificate: %v", err)
	}
	if _, err := NewClient(url, WithTLSFiles(TLSFiles{CA: f.CA, Cert: f.ClientCert})); err == nil || !strings.Contains(err.Error(), "without its key") {
		t.Errorf("certificate without key: %v", err)
	}
	if _, err := NewClient(srv.URL(0), WithTLSFiles(TLSFiles{CA: f.CA})); err == nil || !strings.Contains(err.Error(), "rediss://") {
		t.Errorf("TLS files with redis://: %v", err)
	}
	if _, err := NewClient(url, WithTLSFiles(TLSFiles{CA: f.ClientKey})); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a key as the CA file: %v", err)
	}
	// The system roots do not know the test's CA; the server requires a client certificate.
	if err := ping(TLSFiles{}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error", err)
	}
	if err := ping(TLSFiles{CA: f.CA}); err == nil {
		t.Error("without a client certificate: connected, want refused")
	}
}
