package redisx

import "fmt"

// Env is the REDLITE_REDIS_* environment every process reads the same way (embed it in a
// configuration read with caarlos0/env).
type Env struct {
	// RedisURL is one of the forms URL describes.
	RedisURL string `env:"REDLITE_REDIS_URL" envDefault:"redis://127.0.0.1:6379/0"`
	// RedisCAFile, RedisCertFile and RedisKeyFile are PEM files for rediss://: the CA that
	// verifies Redis (empty: the system's roots) and a client certificate and its key.
	RedisCAFile   string `env:"REDLITE_REDIS_CA_FILE"`
	RedisCertFile string `env:"REDLITE_REDIS_CERT_FILE"`
	RedisKeyFile  string `env:"REDLITE_REDIS_KEY_FILE"`
}

// DefaultURL is REDLITE_REDIS_URL's default.
const DefaultURL = "redis://127.0.0.1:6379/0"

// TLSFiles are the REDLITE_REDIS_*_FILE settings.
func (e Env) TLSFiles() TLSFiles {
	return TLSFiles{CA: e.RedisCAFile, Cert: e.RedisCertFile, Key: e.RedisKeyFile}
}

// URL is REDLITE_REDIS_URL parsed, with the TLS files applied; errors name the variables.
func (e Env) URL() (URL, error) {
	u, err := Parse(e.RedisURL)
	if err != nil {
		return u, fmt.Errorf("REDLITE_REDIS_URL: %w", err)
	}
	if u, err = u.WithTLSFiles(e.TLSFiles()); err != nil {
		return u, fmt.Errorf("REDLITE_REDIS_CA_FILE, REDLITE_REDIS_CERT_FILE, REDLITE_REDIS_KEY_FILE: %w", err)
	}
	return u, nil
}
