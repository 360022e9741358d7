package jobs

import "github.com/redlite/batch/internal/redisx"

// RedisURL is a parsed Redis URL: redis://, rediss:// (TLS), redis-sentinel:// or
// rediss-sentinel://, as NewClient takes them (the forms are spelled out in
// internal/redisx).
type RedisURL = redisx.URL

// TLSFiles are PEM files for a rediss:// connection: CA, the certificates that verify the
// server (instead of the system's roots: a private CA); Cert and Key, a client certificate
// for a Redis that requires one (tls-auth-clients). Each is optional; Cert and Key go
// together. The daemon and the CLI read them from REDLITE_REDIS_CA_FILE,
// REDLITE_REDIS_CERT_FILE and REDLITE_REDIS_KEY_FILE.
type TLSFiles = redisx.TLSFiles

// Errors of a Redis that answers but refuses; test with errors.Is.
var (
	// ErrRedisAuth: Redis refused the URL's credentials (a wrong password or user, or a
	// password where Redis has none).
	ErrRedisAuth = redisx.ErrAuth
	// ErrRedisOOM: Redis is at its maxmemory with the noeviction policy and refuses writes.
	ErrRedisOOM = redisx.ErrOOM
)
