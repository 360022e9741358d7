package jobs

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/hibiken/asynq"
)

// RedisURL is a parsed redis:// or rediss:// URL:
//
//	redis://[[user]:password@]host[:port][/db]
//	rediss://…   (the same, over TLS)
//
// The port defaults to 6379 and the database to 0.
type RedisURL struct {
	Addr     string // host:port
	Username string // for Redis ACLs; empty for the default user
	Password string
	DB       int
	TLS      bool
	// tlsConfig, set by WithTLSFiles, replaces the default TLS configuration (system roots,
	// no client certificate).
	tlsConfig *tls.Config
}

const redisURLForm = "redis://[[user]:password@]host[:port][/db] or rediss://…"

// ParseRedisURL parses s. Errors say what is wrong and never repeat the password.
func ParseRedisURL(s string) (RedisURL, error) {
	if strings.TrimSpace(s) == "" {
		return RedisURL{}, fmt.Errorf("redis url is empty; want %s", redisURLForm)
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the whole URL, password included
		}
		return RedisURL{}, fmt.Errorf("redis url: %v; want %s", err, redisURLForm)
	}
	var r RedisURL
	switch u.Scheme {
	case "redis":
	case "rediss":
		r.TLS = true
	case "":
		return RedisURL{}, fmt.Errorf("redis url: missing scheme; want %s", redisURLForm)
	default:
		return RedisURL{}, fmt.Errorf("redis url: scheme must be redis or rediss, got %q", u.Scheme)
	}
	if u.Opaque != "" {
		return RedisURL{}, fmt.Errorf("redis url: missing // after %s:; want %s", u.Scheme, redisURLForm)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return RedisURL{}, fmt.Errorf("redis url: missing host; want %s", redisURLForm)
	}
	if port == "" {
		port = "6379"
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return RedisURL{}, fmt.Errorf("redis url: port must be between 1 and 65535, got %q", port)
	}
	r.Addr = net.JoinHostPort(host, port)
	if u.User != nil {
		r.Username = u.User.Username()
		r.Password, _ = u.User.Password()
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return RedisURL{}, fmt.Errorf("redis url: database must be a number like /0 after the host, got %q", u.Path)
		}
		r.DB = n
	}
	if u.RawQuery != "" {
		return RedisURL{}, fmt.Errorf("redis url: query parameters are not supported, got %q", u.RawQuery)
	}
	if u.Fragment != "" {
		return RedisURL{}, fmt.Errorf("redis url: a fragment (#…) is not supported")
	}
	return r, nil
}

// String is the URL with the password replaced by "xxxxx", for logs.
func (r RedisURL) String() string {
	u := url.URL{Scheme: "redis", Host: r.Addr, Path: "/" + strconv.Itoa(r.DB)}
	if r.TLS {
		u.Scheme = "rediss"
	}
	switch {
	case r.Password != "":
		u.User = url.UserPassword(r.Username, "xxxxx")
	case r.Username != "":
		u.User = url.User(r.Username)
	}
	return u.String()
}

// AsynqOpt is the connection option for asynq.NewServer and friends.
func (r RedisURL) AsynqOpt() asynq.RedisClientOpt {
	o := asynq.RedisClientOpt{Addr: r.Addr, Username: r.Username, Password: r.Password, DB: r.DB}
	switch {
	case r.tlsConfig != nil:
		o.TLSConfig = r.tlsConfig.Clone()
	case r.TLS:
		host, _, _ := net.SplitHostPort(r.Addr)
		o.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	return o
}
