package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/hibiken/asynq"
)

// NewLogger makes the daemon's logger from REDLITE_LOG_FORMAT and REDLITE_LOG_LEVEL.
func NewLogger(cfg Config, w io.Writer) (*slog.Logger, error) {
	level, err := cfg.logLevel()
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
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
