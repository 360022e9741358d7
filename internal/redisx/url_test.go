package redisx

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in     string
		want   URL
		redact string
	}{
		{"redis://localhost", URL{Addr: "localhost:6379"}, "redis://localhost:6379/0"},
		{"redis://127.0.0.1:7000/3", URL{Addr: "127.0.0.1:7000", DB: 3}, "redis://127.0.0.1:7000/3"},
		{"redis://:s3cret@h:1/", URL{Addr: "h:1", Password: "s3cret"}, "redis://:xxxxx@h:1/0"},
		{"redis://app:s3cret@h/2", URL{Addr: "h:6379", Username: "app", Password: "s3cret", DB: 2}, "redis://app:xxxxx@h:6379/2"},
		{"redis://app@h", URL{Addr: "h:6379", Username: "app"}, "redis://app@h:6379/0"},
		{"rediss://h.example:6380/1", URL{Addr: "h.example:6380", DB: 1, TLS: true}, "rediss://h.example:6380/1"},
		{"redis://[::1]:7000", URL{Addr: "[::1]:7000"}, "redis://[::1]:7000/0"},
		{"redis://u:p%40ss@h", URL{Addr: "h:6379", Username: "u", Password: "p@ss"}, "redis://u:xxxxx@h:6379/0"},
		{"redis-sentinel://s1,s2:26380,[::1]:7/mymaster",
			URL{Sentinels: []string{"s1:26379", "s2:26380", "[::1]:7"}, Master: "mymaster"},
			"redis-sentinel://s1:26379,s2:26380,[::1]:7/mymaster/0"},
		{"rediss-sentinel://app:p%40w@10.0.0.1:26379/prod/2?sentinel_user=mon&sentinel_password=s3cret",
			URL{Sentinels: []string{"10.0.0.1:26379"}, Master: "prod", DB: 2, TLS: true, Username: "app", Password: "p@w", SentinelUsername: "mon", SentinelPassword: "s3cret"},
			"rediss-sentinel://app:xxxxx@10.0.0.1:26379/prod/2?sentinel_password=xxxxx&sentinel_user=mon"},
		{"redis-sentinel://:pw@h/m/", URL{Sentinels: []string{"h:26379"}, Master: "m", Password: "pw"}, "redis-sentinel://:xxxxx@h:26379/m/0"},
	} {
		got, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		if got.String() != tt.redact {
			t.Errorf("String() = %q, want %q", got.String(), tt.redact)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", "redis url is empty; want redis://"},
		{"localhost:6379", `redis url: scheme must be redis, rediss, redis-sentinel or rediss-sentinel, got "localhost"`},
		{"127.0.0.1:6379", "redis url: first path segment in URL cannot contain colon"},
		{"http://h", `redis url: scheme must be redis, rediss, redis-sentinel or rediss-sentinel, got "http"`},
		{"h/0", "redis url: missing scheme"},
		{"redis:h", "redis url: missing // after redis:"},
		{"redis://", "redis url: missing host"},
		{"redis://:pw@:6379", "redis url: missing host"},
		{"redis://h:0", `redis url: port must be between 1 and 65535, got "0"`},
		{"redis://h:99999", `redis url: port must be between 1 and 65535, got "99999"`},
		{"redis://h:x", `invalid port ":x" after host`},
		{"redis://h/db1", `redis url: database must be a number like /0 after the host, got "/db1"`},
		{"redis://h/1/2", `redis url: database must be a number like /0 after the host, got "/1/2"`},
		{"redis://h/-1", `redis url: database must be a number like /0 after the host, got "/-1"`},
		{"redis://h/0?dial_timeout=3s", `redis url: query parameters are not supported, got "dial_timeout=3s"`},
		{"redis://h/0#x", "redis url: a fragment (#…) is not supported"},
		{"redis://u:s3cret@h:bad", `invalid port ":bad" after host`},
		{"redis-sentinel://u:s3cret@/m", "no sentinel address"},
		{"redis-sentinel://h1,,h2/m", "empty sentinel host"},
		{"redis-sentinel://h1:0/m", "sentinel port must be between 1 and 65535"},
		{"redis-sentinel://:s3cret@h1", "missing the primary's name"},
		{"redis-sentinel://h1/m/x", "database must be a number"},
		{"redis-sentinel://h1/m?sentinel_password=s3cret&tls=1", `unknown parameter "tls"`},
		{"redis-sentinel://h1/m#frag", "fragment"},
		{"sentinel://h1/m", "scheme must be redis, rediss, redis-sentinel or rediss-sentinel"},
	} {
		_, err := Parse(tt.in)
		if err == nil {
			t.Errorf("Parse(%q) succeeded, want error containing %q", tt.in, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %q, want it to contain %q", tt.in, err, tt.want)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Parse(%q) error repeats the password: %q", tt.in, err)
		}
	}
}

func TestAsynqOpt(t *testing.T) {
	u, err := Parse("rediss://app:pw@cache.example:6380/4")
	if err != nil {
		t.Fatal(err)
	}
	o := u.AsynqOpt().(asynq.RedisClientOpt)
	if o.Addr != "cache.example:6380" || o.Username != "app" || o.Password != "pw" || o.DB != 4 {
		t.Errorf("AsynqOpt = %+v", o)
	}
	if o.TLSConfig == nil || o.TLSConfig.ServerName != "cache.example" {
		t.Errorf("TLSConfig = %+v, want ServerName cache.example", o.TLSConfig)
	}
	plain, _ := Parse("redis://h")
	if plain.AsynqOpt().(asynq.RedisClientOpt).TLSConfig != nil {
		t.Error("redis:// got a TLS config")
	}
	s, _ := Parse("rediss-sentinel://:pw@a,b:1/m/3?sentinel_password=sp")
	f, ok := s.AsynqOpt().(asynq.RedisFailoverClientOpt)
	if !ok || f.MasterName != "m" || len(f.SentinelAddrs) != 2 || f.Password != "pw" || f.SentinelPassword != "sp" || f.DB != 3 || f.TLSConfig == nil {
		t.Errorf("sentinel AsynqOpt = %+v", s.AsynqOpt())
	}
}

// FuzzParse: any string parses or fails with an error that never repeats a password,
// and what parses prints (String) without its passwords and parses back to the same.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"redis://u:pw@h:1/2", "rediss://h", "redis-sentinel://:pw@a,b:2/m/1?sentinel_password=sp", "redis://[::1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := Parse(s)
		if err != nil {
			return
		}
		printed := u.String()
		for _, secret := range []string{u.Password, u.SentinelPassword} {
			if len(secret) >= 4 && secret != "xxxxx" && strings.Contains(printed, secret) && !strings.Contains(u.Addr+strings.Join(u.Sentinels, ",")+u.Master+u.Username+u.SentinelUsername, secret) {
				t.Fatalf("String() %q shows a password", printed)
			}
		}
		if u.Master != "" && len(u.Sentinels) == 0 || u.Master == "" && u.Addr == "" {
			t.Fatalf("parsed %q into %+v: no address", s, u)
		}
	})
}
