package redisx

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// TLSFiles are PEM files for a rediss:// connection: CA, the certificates that verify the
// server (instead of the system's roots: a private CA); Cert and Key, a client certificate
// for a Redis that requires one (tls-auth-clients). Each is optional; Cert and Key go
// together. The daemon and the CLI read them from REDLITE_REDIS_CA_FILE,
// REDLITE_REDIS_CERT_FILE and REDLITE_REDIS_KEY_FILE.
type TLSFiles struct {
	CA, Cert, Key string
}

func (f TLSFiles) empty() bool { return f == TLSFiles{} }

// WithTLSFiles returns r with its TLS configuration made from f. Errors name the file and
// what is wrong with it; f with any file needs a rediss:// URL.
func (r URL) WithTLSFiles(f TLSFiles) (URL, error) {
	if f.empty() {
		return r, nil
	}
	if !r.TLS {
		return r, errors.New("TLS files are given but the Redis URL is redis://, not rediss:// (or rediss-sentinel://)")
	}
	host, _, _ := net.SplitHostPort(r.Addr)
	c := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return r, fmt.Errorf("CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return r, fmt.Errorf("CA file %s: no PEM certificate in it", f.CA)
		}
		c.RootCAs = pool
	}
	switch {
	case f.Cert != "" && f.Key != "":
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return r, fmt.Errorf("client certificate %s and key %s: %w", f.Cert, f.Key, err)
		}
		c.Certificates = []tls.Certificate{pair}
	case f.Cert != "":
		return r, fmt.Errorf("client certificate %s is given without its key file", f.Cert)
	case f.Key != "":
		return r, fmt.Errorf("client key %s is given without its certificate file", f.Key)
	}
	r.tlsConfig = c
	return r, nil
}
