// Package envconf is what the daemon and the API server share in reading their REDLITE_*
// environment: parsing with errors that name the variable (not the Go field) and say what a
// valid value looks like, and the logger. The Redis variables are redisx.Env.
package envconf

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// Parse reads a T from environ (os.Environ() form, "KEY=value") with the defaults of its
// envDefault tags. An empty variable means the default, as the README says; env would
// otherwise parse "" for numbers and fail. Errors name the variable.
func Parse[T any](environ []string) (T, error) {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && v != "" {
			m[k] = v
		}
	}
	cfg, err := env.ParseAsWithOptions[T](env.Options{Environment: m})
	if err != nil {
		return cfg, Explain[T](err)
	}
	return cfg, nil
}

// Vars lists the environment variables a T reads, its embedded structs' included.
func Vars[T any]() []string {
	var out []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if v := f.Tag.Get("env"); v != "" {
				out = append(out, v)
			} else if f.Type.Kind() == reflect.Struct {
				walk(f.Type)
			}
		}
	}
	walk(reflect.TypeFor[T]())
	return out
}

// Explain rewrites err, from env.Parse into a struct of type T, naming each variable.
func Explain[T any](err error) error {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err
	}
	var msgs []string
	t := reflect.TypeFor[T]()
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			name := pe.Name
			if f, ok := t.FieldByName(pe.Name); ok {
				name = f.Tag.Get("env")
			}
			msgs = append(msgs, fmt.Sprintf("%s: %s", name, parseErrText(pe)))
			continue
		}
		msgs = append(msgs, e.Error())
	}
	return errors.New(strings.Join(msgs, "; "))
}

func parseErrText(pe env.ParseError) string {
	var ne *strconv.NumError
	if errors.As(pe.Err, &ne) {
		return fmt.Sprintf("%q is not a valid %s", ne.Num, pe.Type)
	}
	if pe.Type == reflect.TypeFor[time.Duration]() {
		return fmt.Sprintf("want a duration like 250ms, 15s or 10m: %v", pe.Err)
	}
	return pe.Err.Error()
}

// Log is the logging environment the daemon and the API server share (embed it).
type Log struct {
	// LogFormat is text or json; LogLevel is debug, info, warn or error.
	LogFormat string `env:"REDLITE_LOG_FORMAT" envDefault:"text"`
	LogLevel  string `env:"REDLITE_LOG_LEVEL" envDefault:"info"`
}

// Check reports a bad REDLITE_LOG_FORMAT or REDLITE_LOG_LEVEL, naming it.
func (l Log) Check() error {
	if l.LogFormat != "text" && l.LogFormat != "json" {
		return fmt.Errorf("REDLITE_LOG_FORMAT: want text or json, got %q", l.LogFormat)
	}
	_, err := LogLevel(l.LogLevel)
	return err
}

// NewLogger makes the logger of these settings (text or json, at the level), writing to w.
func (l Log) NewLogger(w io.Writer) (*slog.Logger, error) {
	level, err := LogLevel(l.LogLevel)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	if l.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// LogLevel reads REDLITE_LOG_LEVEL's value.
func LogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("REDLITE_LOG_LEVEL: want debug, info, warn or error, got %q", s)
	}
	return l, nil
}
