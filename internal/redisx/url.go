package redisx

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

// URL is a parsed Redis URL, for one server or for a primary found through Redis
// Sentinel:
//
//	redis://[[user]:password@]host[:port][/db]
//	rediss://…   (the same, over TLS)
//	redis-sentinel://[[user]:password@]host[:port][,host[:port]…]/master[/db][?sentinel_user=U&sentinel_password=P]
//	rediss-sentinel://…   (the same, over TLS to the sentinels and the primary)
//
// The port defaults to 6379, a sentinel's to 26379, and the database to 0. With Sentinel,
// user and password are the primary's (and its replicas'); sentinel_user and
// sentinel_password authenticate to the sentinels when they require it.
type URL struct {
	Addr     string // host:port; empty with Sentinel
	Username string // for Redis ACLs; empty for the default user
	Password string
	DB       int
	TLS      bool
	// tlsConfig, set by WithTLSFiles, replaces the default TLS configuration (system roots,
	// no client certificate).
	tlsConfig *tls.Config

	// Sentinel: the sentinels' host:port addresses and the name of the primary they watch.
	Sentinels                          []string
	Master                             string
	SentinelUsername, SentinelPassword string
}

const urlForm = "redis://[[user]:password@]host[:port][/db], rediss://…, or redis-sentinel://[[user]:password@]host[:port][,host[:port]…]/master[/db]"

// Parse parses s. Errors say what is wrong and never repeat the password.
func Parse(s string) (URL, error) {
	if strings.TrimSpace(s) == "" {
		return URL{}, fmt.Errorf("redis url is empty; want %s", urlForm)
	}
	if scheme, rest, ok := strings.Cut(s, "://"); ok && (scheme == "redis-sentinel" || scheme == "rediss-sentinel") {
		return parseSentinelURL(scheme, rest)
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the whole URL, password included
		}
		return URL{}, fmt.Errorf("redis url: %v; want %s", err, urlForm)
	}
	var r URL
	switch u.Scheme {
	case "redis":
	case "rediss":
		r.TLS = true
	case "":
		return URL{}, fmt.Errorf("redis url: missing scheme; want %s", urlForm)
	default:
		return URL{}, fmt.Errorf("redis url: scheme must be redis, rediss, redis-sentinel or rediss-sentinel, got %q", u.Scheme)
	}
	if u.Opaque != "" {
		return URL{}, fmt.Errorf("redis url: missing // after %s:; want %s", u.Scheme, urlForm)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return URL{}, fmt.Errorf("redis url: missing host; want %s", urlForm)
	}
	if port == "" {
		port = "6379"
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return URL{}, fmt.Errorf("redis url: port must be between 1 and 65535, got %q", port)
	}
	r.Addr = net.JoinHostPort(host, port)
	if u.User != nil {
		r.Username = u.User.Username()
		r.Password, _ = u.User.Password()
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return URL{}, fmt.Errorf("redis url: database must be a number like /0 after the host, got %q", u.Path)
		}
		r.DB = n
	}
	if u.RawQuery != "" {
		return URL{}, fmt.Errorf("redis url: query parameters are not supported, got %q", u.RawQuery)
	}
	if u.Fragment != "" {
		return URL{}, fmt.Errorf("redis url: a fragment (#…) is not supported")
	}
	return r, nil
}

// String is the URL with the passwords replaced by "xxxxx", for logs.
func (r URL) String() string {
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
	if r.Master == "" {
		return u.String()
	}
	u.Scheme += "-sentinel"
	u.Host = strings.Join(r.Sentinels, ",")
	u.Path = "/" + r.Master + u.Path
	q := url.Values{}
	if r.SentinelUsername != "" {
		q.Set("sentinel_user", r.SentinelUsername)
	}
	if r.SentinelPassword != "" {
		q.Set("sentinel_password", "xxxxx")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// AsynqOpt is the connection option for asynq.NewServer and friends: one server, or the
// primary that the sentinels name (go-redis follows a failover to the new primary).
func (r URL) AsynqOpt() asynq.RedisConnOpt {
	var tlsConfig *tls.Config
	switch {
	case r.tlsConfig != nil:
		tlsConfig = r.tlsConfig.Clone()
	case r.TLS:
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if r.Master == "" {
			// With Sentinel each server's name is taken from the address it is dialled at.
			tlsConfig.ServerName, _, _ = net.SplitHostPort(r.Addr)
		}
	}
	if r.Master != "" {
		return asynq.RedisFailoverClientOpt{
			MasterName: r.Master, SentinelAddrs: r.Sentinels,
			SentinelUsername: r.SentinelUsername, SentinelPassword: r.SentinelPassword,
			Username: r.Username, Password: r.Password, DB: r.DB, TLSConfig: tlsConfig,
		}
	}
	return asynq.RedisClientOpt{Addr: r.Addr, Username: r.Username, Password: r.Password, DB: r.DB, TLSConfig: tlsConfig}
}

// parseSentinelURL parses what follows "redis-sentinel://" (or "rediss-sentinel://"). The
// standard URL parser takes one host only, so the parts are cut here.
func parseSentinelURL(scheme, rest string) (URL, error) {
	r := URL{TLS: scheme == "rediss-sentinel"}
	form := "want " + scheme + "://[[user]:password@]host[:port][,host[:port]…]/master[/db]"
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		return URL{}, errors.New("redis url: a fragment (#…) is not supported")
	}
	rest, query, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		user, pass, hasPass := strings.Cut(authority[:at], ":")
		var err1, err2 error
		r.Username, err1 = url.PathUnescape(user)
		if hasPass {
			r.Password, err2 = url.PathUnescape(pass)
		}
		if err1 != nil || err2 != nil {
			return URL{}, errors.New("redis url: bad %-escape in the user or password")
		}
		authority = authority[at+1:]
	}
	if authority == "" {
		return URL{}, fmt.Errorf("redis url: no sentinel address; %s", form)
	}
	for _, h := range strings.Split(authority, ",") {
		host, port := h, "26379"
		if strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1 {
			var err error
			if host, port, err = net.SplitHostPort(h); err != nil {
				if !strings.Contains(err.Error(), "missing port") {
					return URL{}, fmt.Errorf("redis url: sentinel address %q: %v", h, err)
				}
				host, port = strings.Trim(h, "[]"), "26379"
			}
		}
		if host == "" {
			return URL{}, fmt.Errorf("redis url: empty sentinel host in %q; %s", authority, form)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return URL{}, fmt.Errorf("redis url: sentinel port must be between 1 and 65535, got %q", port)
		}
		r.Sentinels = append(r.Sentinels, net.JoinHostPort(host, port))
	}
	master, db, hasDB := strings.Cut(path, "/")
	if master == "" {
		return URL{}, fmt.Errorf("redis url: missing the primary's name after the sentinels; %s", form)
	}
	r.Master = master
	if hasDB && db != "" {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			return URL{}, fmt.Errorf("redis url: database must be a number like /0 after the primary's name, got %q", "/"+db)
		}
		r.DB = n
	}
	if query != "" {
		q, err := url.ParseQuery(query)
		if err != nil {
			return URL{}, errors.New("redis url: the query after ? does not parse")
		}
		for k, v := range q {
			switch k {
			case "sentinel_user":
				r.SentinelUsername = v[len(v)-1]
			case "sentinel_password":
				r.SentinelPassword = v[len(v)-1]
			default:
				return URL{}, fmt.Errorf("redis url: unknown parameter %q (have sentinel_user, sentinel_password)", k)
			}
		}
	}
	return r, nil
}
