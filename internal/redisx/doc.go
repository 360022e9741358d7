// Package redisx is everything Red Lite Batch knows about talking to Redis, in one place:
// the URL forms (one server, TLS, Sentinel) and their TLS files, the REDLITE_REDIS_*
// environment, the one client a process builds and shares with asynq, the errors of a Redis
// that refuses (bad credentials, out of memory), and the names of asynq's own keys that we
// read or move.
package redisx
