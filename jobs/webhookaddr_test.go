package jobs

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

// mapResolver answers from a table; a name outside it does not exist.
type mapResolver map[string][]string

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	ss, ok := m[canonicalHost(host)]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

// publicAddr stands for a receiver on the internet (example.com's address); nothing here
// connects to it.
const publicAddr = "93.184.215.14"

var testResolver = mapResolver{
	"hooks.example.com":        {publicAddr, "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
	"rebind.example.com":       {"127.0.0.1"},
	"rebind6.example.com":      {"::1"},
	"mixed.example.com":        {publicAddr, "10.0.0.7"},
	"mapped.example.com":       {"::ffff:169.254.169.254"},
	"cgnat.example.com":        {"100.100.100.200"},
	"hooks.corp.example.com":   {"10.1.2.3"},
	"hooks.corp.internal":      {"10.1.2.4"},
	"localhost":                {"127.0.0.1"},
	"metadata.google.internal": {"169.254.169.254"},
}

// checkAtSubmit is what Client.Enqueue checks of a webhook_url: the payload's rules, then
// the addresses.
func checkAtSubmit(raw string, allow WebhookAllow) error {
	g := &Generate{Version: Version, Prompt: "x", Common: Common{WebhookURL: raw}}
	if err := g.Validate(); err != nil {
		return err
	}
	return CheckWebhookURL(context.Background(), raw, allow, testResolver)
}

func TestWebhookURLRefusedAtSubmit(t *testing.T) {
	for _, c := range []struct {
		name, url, want string
	}{
		{"Metadata", "http://169.254.169.254/latest/meta-data/", "link-local"},
		{"MetadataGoogle", "http://metadata.google.internal/computeMetadata/v1/", "metadata"},
		{"MetadataGoogleDot", "http://Metadata.Google.Internal./computeMetadata/v1/", "metadata"},
		{"MetadataShort", "http://metadata/", "metadata"},
		{"InstanceData", "http://instance-data/latest/", "metadata"},
		{"AlibabaMetadata", "http://100.100.100.200/latest/meta-data/", "carrier-grade NAT"},
		{"Private10", "http://10.0.0.1/hook", "private"},
		{"Private172", "http://172.16.5.4/hook", "private"},
		{"Private172Top", "http://172.31.255.254/hook", "private"},
		{"Private192", "https://192.168.1.1/hook", "private"},
		{"CGNAT", "http://100.64.0.1/hook", "carrier-grade NAT"},
		{"Localhost", "http://localhost:6379/", "loopback"},
		{"LocalhostUpper", "http://LOCALHOST./", "loopback"},
		{"LocalhostSub", "http://redis.localhost/", ".localhost"[1:]},
		{"Loopback", "http://127.0.0.1:6379/", "loopback"},
		{"LoopbackOther", "http://127.1.2.3/", "loopback"},
		{"IPv6Loopback", "http://[::1]:6379/", "loopback"},
		{"Unspecified", "http://0.0.0.0:6379/", "unspecified"},
		{"Unspecified0", "http://0.1.2.3/", "unspecified"},
		{"IPv6Unspecified", "http://[::]/", "unspecified"},
		{"Mapped", "http://[::ffff:127.0.0.1]/", "IPv4-mapped form of a loopback"},
		{"MappedHex", "http://[::ffff:7f00:1]/", "IPv4-mapped form of a loopback"},
		{"MappedMetadata", "http://[::ffff:a9fe:a9fe]/", "IPv4-mapped form of a link-local"},
		{"MappedPrivate", "http://[0:0:0:0:0:ffff:10.0.0.1]/", "IPv4-mapped form of a private"},
		{"IPv4Compatible", "http://[::127.0.0.1]/", "IPv4-compatible"},
		{"NAT64", "http://[64:ff9b::a9fe:a9fe]/", "link-local"},
		{"SixToFour", "http://[2002:7f00:1::]/", "loopback"},
		{"LinkLocal6", "http://[fe80::1]/", "link-local"},
		{"Zone", "http://[fe80::1%25eth0]/", "zone"},
		{"UniqueLocal", "http://[fd12:3456::1]/", "unique-local"},
		{"UniqueLocalFC", "http://[fc00::1]/", "unique-local"},
		{"Multicast", "http://224.0.0.1/", "multicast"},
		{"Multicast6", "http://[ff02::1]/", "multicast"},
		{"Broadcast", "http://255.255.255.255/", "broadcast"},
		{"Decimal", "http://2130706433/", "dotted-decimal"},
		{"DecimalMetadata", "http://2852039166/latest/", "dotted-decimal"},
		{"Octal", "http://0177.0.0.1/", "dotted-decimal"},
		{"Hex", "http://0x7f000001/", "dotted-decimal"},
		{"HexParts", "http://0x7f.0.0.1/", "dotted-decimal"},
		{"ShortForm", "http://127.1/", "dotted-decimal"},
		{"LeadingZeros", "http://010.0.0.1/", "dotted-decimal"},
		{"Credentials", "http://user:s3cr3t@hooks.example.com/", "credentials"},
		{"User", "https://user@hooks.example.com/", "credentials"},
		{"EmptyPassword", "https://:@hooks.example.com/", "credentials"},
		{"SingleLabel", "http://redis:6379/", "single-label"},
		{"InternalTLD", "http://hooks.corp.internal/", "internal"},
		{"MDNS", "http://printer.local/", "local"},
		{"NotASCII", "http://ⓛocalhost/", "ASCII"},
		{"ResolvesToLoopback", "http://rebind.example.com/hook", "resolves to a loopback"},
		{"ResolvesToLoopback6", "http://rebind6.example.com/hook", "resolves to a loopback"},
		{"ResolvesToMixed", "http://mixed.example.com/hook", "resolves to a private"},
		{"ResolvesToMapped", "http://mapped.example.com/hook", "resolves to the IPv4-mapped form of a link-local"},
		{"ResolvesToCGNAT", "http://cgnat.example.com/", "resolves to a carrier-grade NAT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkAtSubmit(c.url, WebhookAllow{})
			if !errors.Is(err, ErrBadPayload) {
				t.Fatalf("got %v, want a payload error", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Field != "webhook_url" {
				t.Fatalf("got %#v, want a ValidationError of webhook_url", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %q, want it to say %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the error repeats the URL's password: %q", err)
			}
		})
	}
}

func TestWebhookURLAccepted(t *testing.T) {
	allow, err := ParseWebhookAllow("127.0.0.1/32, 10.1.0.0/16, fd00::/8, hooks.corp.internal, 192.168.7.7")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, url string
		allow     WebhookAllow
	}{
		{"Public", "https://hooks.example.com/x?token=abc", WebhookAllow{}},
		{"PublicAddr", "http://" + publicAddr + ":8080/x", WebhookAllow{}},
		{"PublicIPv6", "http://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/", WebhookAllow{}},
		{"MappedPublic", "http://[::ffff:93.184.215.14]/", WebhookAllow{}},
		// Not known to be internal; the worker checks again when it connects.
		{"DoesNotResolve", "https://nowhere.example.com/", WebhookAllow{}},
		{"AllowedLoopback", "http://127.0.0.1:8080/x", allow},
		{"AllowedAddr", "http://192.168.7.7/x", allow},
		{"AllowedResolved", "http://hooks.corp.example.com/x", allow},
		{"AllowedName", "http://hooks.corp.internal/x", allow},
		{"AllowedNameUpper", "http://HOOKS.corp.internal./x", allow},
		{"AllowedIPv6", "http://[fd12::1]/x", allow},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := checkAtSubmit(c.url, c.allow); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
	// The allowlist opens addresses, not spellings or credentials.
	for _, u := range []string{"http://2130706433/", "http://127.1/", "http://u:p@127.0.0.1/", "http://10.2.0.1/", "http://localhost/"} {
		if err := checkAtSubmit(u, allow); !errors.Is(err, ErrBadPayload) {
			t.Errorf("%s with the allowlist: got %v, want refused", u, err)
		}
	}
}

func TestParseWebhookAllow(t *testing.T) {
	a, err := ParseWebhookAllow(" 10.0.0.0/8,,127.0.0.1 ,Hooks.Internal., ::1 ")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.String(), "10.0.0.0/8,127.0.0.1/32,::1/128,hooks.internal"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "not a host", "300.1.1.1/8", "-x.example"} {
		if _, err := ParseWebhookAllow(bad); err == nil || !strings.Contains(err.Error(), "REDLITE_WEBHOOK_ALLOW") {
			t.Errorf("%q: got %v, want an error naming REDLITE_WEBHOOK_ALLOW", bad, err)
		}
	}
}

// TestEnqueueRefusesInternalWebhook: the Go client refuses at submit, with a payload error,
// and enqueues nothing.
func TestEnqueueRefusesInternalWebhook(t *testing.T) {
	srv := setupRedisOnly(t)
	c, err := NewClient(srv, WithResolver(testResolver))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, u := range []string{"http://169.254.169.254/", "http://rebind.example.com/", "http://u:p@hooks.example.com/"} {
		_, err := c.Enqueue(context.Background(), &Generate{Version: Version, Prompt: "x", Common: Common{WebhookURL: u}}, EnqueueAnyway())
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != "webhook_url" {
			t.Errorf("%s: got %v, want a webhook_url ValidationError", u, err)
		}
	}
	if n := c.rdb.Keys(context.Background(), "asynq:{*}:t:*").Val(); len(n) != 0 {
		t.Errorf("refused jobs were enqueued: %v", n)
	}
	allowed, err := NewClient(srv, WithResolver(testResolver), WithWebhookAllow(mustAllow(t, "127.0.0.0/8")))
	if err != nil {
		t.Fatal(err)
	}
	defer allowed.Close()
	if _, err := allowed.Enqueue(context.Background(), &Generate{Version: Version, Prompt: "x", Common: Common{WebhookURL: "http://rebind.example.com/"}}, EnqueueAnyway()); err != nil {
		t.Errorf("allowlisted: %v", err)
	}
}

func mustAllow(t *testing.T, s string) WebhookAllow {
	t.Helper()
	a, err := ParseWebhookAllow(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func setupRedisOnly(t *testing.T) string {
	_, b := setup(t)
	return b.url
}

// TestWebhookDialer: the dial function refuses what resolves to loopback at the moment of
// delivery (the name resolved publicly at submit), and reaches an allowed receiver.
func TestWebhookDialer(t *testing.T) {
	got := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
	}))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	// At delivery, hooks.example.com has moved to the receiver on loopback.
	rebound := mapResolver{"hooks.example.com": {"127.0.0.1"}, "hooks.corp.internal": {"127.0.0.1"}}
	post := func(allow WebhookAllow, url string) error {
		c := &http.Client{Transport: &http.Transport{DialContext: allow.DialContext(rebound, net.Dialer{Timeout: 10 * time.Second})}}
		resp, err := c.Post(url, "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, u := range []string{"http://hooks.example.com:" + port + "/", srv.URL + "/", "http://localhost:" + port + "/", "http://[::ffff:127.0.0.1]:" + port + "/"} {
		if err := post(WebhookAllow{}, u); !errors.Is(err, ErrWebhookAddress) {
			t.Errorf("%s: got %v, want ErrWebhookAddress", u, err)
		}
	}
	if err := post(mustAllow(t, "127.0.0.1/32"), "http://hooks.example.com:"+port+"/"); err != nil {
		t.Errorf("allowlisted address: %v", err)
	}
	if err := post(mustAllow(t, "hooks.corp.internal"), "http://hooks.corp.internal:"+port+"/"); err != nil {
		t.Errorf("allowlisted name: %v", err)
	}
	if n := len(got); n != 2 {
		t.Errorf("the receiver got %d POSTs, want 2 (the allowlisted ones)", n)
	}
}

// FuzzWebhookURL: the submit check never panics, and what it accepts by address is public.
func FuzzWebhookURL(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1/", "http://[::ffff:7f00:1]/", "http://2130706433/", "http://0x7f.1/",
		"https://hooks.example.com/x", "http://u:p@h.example.com/", "http://[fe80::1%25lo]/", "http://ⓛocalhost/", "http://a..b/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if checkAtSubmit(raw, WebhookAllow{}) != nil {
			return
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("accepted %q, which does not parse: %v", raw, err)
		}
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil && internalAddr(ip) != "" {
			t.Fatalf("accepted %q, an internal address", raw)
		}
	})
}

// FuzzParseWebhookAllow: REDLITE_WEBHOOK_ALLOW never panics the parser, and what it accepts
// reads back the same from its String.
func FuzzParseWebhookAllow(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", " 127.0.0.1 ,hooks.internal.", "::1,fd00::/8", "10.0.0.0/40", "a..b", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseWebhookAllow(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "REDLITE_WEBHOOK_ALLOW: ") {
				t.Fatalf("error does not name the variable: %v", err)
			}
			return
		}
		b, err := ParseWebhookAllow(a.String())
		if err != nil || b.String() != a.String() {
			t.Fatalf("%q read as %q, which reads back as %q, %v", s, a, b, err)
		}
	})
}
