package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLSFiles are PEM files of a private CA made for one test, a server certificate it signed
// for localhost and 127.0.0.1, and a client certificate it signed.
type TLSFiles struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewTLSFiles makes a CA and two certificates in a temporary directory.
func NewTLSFiles(t testing.TB) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert := newCert(t, "redistest CA", nil, nil, true)
	f := TLSFiles{CA: filepath.Join(dir, "ca.pem")}
	writePEM(t, f.CA, "CERTIFICATE", caCert.Raw)
	for _, who := range []string{"server", "client"} {
		key, cert := newCert(t, "redistest "+who, caCert, caKey, false)
		certFile, keyFile := filepath.Join(dir, who+".pem"), filepath.Join(dir, who+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", cert.Raw)
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, keyFile, "PRIVATE KEY", der)
		if who == "server" {
			f.ServerCert, f.ServerKey = certFile, keyFile
		} else {
			f.ClientCert, f.ClientKey = certFile, keyFile
		}
	}
	return f
}

func newCert(t testing.TB, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, isCA bool) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.ExtKeyUsage, tmpl.DNSNames, tmpl.IPAddresses = nil, nil, nil
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// WithTLS adds a TLS port served with f's server certificate that requires client
// certificates signed by f's CA (the plain port stays, for the readiness probe).
func WithTLS(f TLSFiles) Option { return func(s *Server) { s.tls = &f } }

func (s *Server) tlsArgs() ([]string, error) {
	if s.tls == nil {
		return nil, nil
	}
	if s.tlsPort == 0 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.tlsPort = port
	}
	return []string{"--tls-port", strconv.Itoa(s.tlsPort), "--tls-cert-file", s.tls.ServerCert,
		"--tls-key-file", s.tls.ServerKey, "--tls-ca-cert-file", s.tls.CA, "--tls-auth-clients", "yes"}, nil
}

// TLSURL is a rediss:// URL of the TLS port (WithTLS) that selects database db.
func (s *Server) TLSURL(db int) string {
	return fmt.Sprintf("rediss://localhost:%d/%d", s.tlsPort, db)
}
