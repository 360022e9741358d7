// Package envconf turns the errors of github.com/caarlos0/env into messages that name the
// environment variable (not the Go field) and say what a valid value looks like: the daemon
// and the API server are configured the same way.
package envconf

import (
	"errors"
	"fmt"
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
