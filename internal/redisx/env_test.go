package redisx

import (
	"reflect"
	"strings"
	"testing"
)

func TestEnv(t *testing.T) {
	f, _ := reflect.TypeFor[Env]().FieldByName("RedisURL")
	if got := f.Tag.Get("envDefault"); got != DefaultURL {
		t.Errorf("REDLITE_REDIS_URL's default is %q, DefaultURL %q", got, DefaultURL)
	}
	u, err := Env{RedisURL: DefaultURL}.URL()
	if err != nil || u.Addr != "127.0.0.1:6379" {
		t.Errorf("default: %+v %v", u, err)
	}
	for _, tt := range []struct {
		env  Env
		want string
	}{
		{Env{RedisURL: "http://x"}, "REDLITE_REDIS_URL: redis url: scheme must be"},
		{Env{RedisURL: DefaultURL, RedisCAFile: "/nonexistent/ca.pem"}, "REDLITE_REDIS_CA_FILE, REDLITE_REDIS_CERT_FILE, REDLITE_REDIS_KEY_FILE: TLS files are given but the Redis URL is redis://"},
		{Env{RedisURL: "rediss://h", RedisCertFile: "c.pem"}, "REDLITE_REDIS_CA_FILE, REDLITE_REDIS_CERT_FILE, REDLITE_REDIS_KEY_FILE: client certificate c.pem is given without its key file"},
	} {
		if _, err := tt.env.URL(); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q…", tt.env, err, tt.want)
		}
	}
}
