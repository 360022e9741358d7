package daemon

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// NewLogger makes the daemon's logger from REDLITE_LOG_FORMAT and REDLITE_LOG_LEVEL.
func NewLogger(cfg Config, w io.Writer) (*slog.Logger, error) {
	return cfg.NewLogger(w)
}

// asynqLogger sends asynq's log lines to slog.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...)) }

// Fatal logs at error level and does not exit: asynq v0.26 never calls it, and a library
// must not end the daemon behind its back.
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...)) }

// asynqLevel passes slog's level on, so asynq does not format lines slog would drop.
func asynqLevel(l *slog.Logger) asynq.LogLevel {
	ctx := context.Background()
	switch {
	case l.Enabled(ctx, slog.LevelDebug):
		return asynq.DebugLevel
	case l.Enabled(ctx, slog.LevelInfo):
		return asynq.InfoLevel
	case l.Enabled(ctx, slog.LevelWarn):
		return asynq.WarnLevel
	}
	return asynq.ErrorLevel
}

// RouteLibraryLogs sends what the libraries log by themselves through l, so that with
// REDLITE_LOG_FORMAT=json every line redlited writes is JSON: go-redis's own logger (pool
// and pub/sub messages) and the standard log package (asynq's queue-metrics collector logs
// with it). Both are process-wide, so only a program (redlited) calls this, once.
func RouteLibraryLogs(l *slog.Logger) {
	redis.SetLogger(redisLogger{l.With("component", "go-redis")})
	log.SetFlags(0)
	log.SetOutput(stdLogWriter{l.With("component", "log")})
}

// redisLogger is go-redis's logger interface on slog. go-redis logs only trouble (a bad
// connection discarded, a failed reconnect), hence warn.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, fmt.Sprintf(format, v...))
}

// stdLogWriter turns the standard log package's lines into slog records at warn: what
// libraries log that way is trouble too.
type stdLogWriter struct{ l *slog.Logger }

func (w stdLogWriter) Write(p []byte) (int, error) {
	w.l.Warn(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
