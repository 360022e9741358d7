package jobs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"
)

// A worker POSTs a result wherever a client's webhook_url says, from inside the operator's
// network: without a check, a client could make it talk to a cloud metadata service, to
// Redis, or to an admin page on loopback. So a webhook reaches public addresses only, unless
// the operator lists the receiver in REDLITE_WEBHOOK_ALLOW. The same rules run twice: at
// submit on the URL and on what its host resolves to (CheckWebhookURL, in Client.Enqueue),
// and at delivery on the address the worker connects to (WebhookAllow.DialContext), which
// resolves the name once and dials the address it checked, so a name whose answer changes
// between the two (DNS rebinding) is refused all the same.

// ErrWebhookAddress: a webhook URL's host is, or resolves to, an address that webhooks may
// not reach. The error is a *WebhookAddressError.
var ErrWebhookAddress = errors.New("webhook address not allowed")

// WebhookAddressError says why a webhook's host is refused.
type WebhookAddressError struct {
	Host string
	// Why is what the host is, e.g. "is a loopback address" or "resolves to a private
	// address".
	Why string
}

func (e *WebhookAddressError) Error() string {
	return fmt.Sprintf("host %q %s; webhooks reach only public addresses unless the operator allows the receiver in REDLITE_WEBHOOK_ALLOW", e.Host, e.Why)
}

// Is makes errors.Is(err, ErrWebhookAddress) true.
func (e *WebhookAddressError) Is(target error) bool { return target == ErrWebhookAddress }

// WebhookLookupTimeout bounds the lookup of a webhook's host at submit. A host that does not
// resolve in time (or at all) is accepted there: it is not known to be internal, and the
// worker checks the address again when it connects.
const WebhookLookupTimeout = 3 * time.Second

// Resolver looks up the addresses of a host name; *net.Resolver is one. Tests map names of
// their own with it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// WebhookAllow is REDLITE_WEBHOOK_ALLOW: the receivers on internal addresses that an
// operator lets webhooks reach, as CIDRs ("10.1.0.0/16"), addresses ("10.1.2.3") and host
// names ("hooks.corp.internal", matched exactly, case aside). The zero value allows none.
type WebhookAllow struct {
	prefixes []netip.Prefix
	hosts    []string
}

// ParseWebhookAllow reads a comma-separated list of CIDRs, addresses and host names.
func ParseWebhookAllow(s string) (WebhookAllow, error) {
	a, err := parseWebhookAllow(s)
	if err != nil {
		return WebhookAllow{}, fmt.Errorf("REDLITE_WEBHOOK_ALLOW: %w", err)
	}
	return a, nil
}

func parseWebhookAllow(s string) (WebhookAllow, error) {
	var a WebhookAllow
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
			continue
		case strings.Contains(e, "/"):
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return WebhookAllow{}, fmt.Errorf("%q is not a CIDR like 10.0.0.0/8", e)
			}
			a.prefixes = append(a.prefixes, p.Masked())
		default:
			if ip, err := netip.ParseAddr(e); err == nil {
				a.prefixes = append(a.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				continue
			}
			h := canonicalHost(e)
			if !validHostName(h) {
				return WebhookAllow{}, fmt.Errorf("%q is neither a CIDR, an IP address nor a host name", e)
			}
			a.hosts = append(a.hosts, h)
		}
	}
	return a, nil
}

// UnmarshalText lets a configuration struct read REDLITE_WEBHOOK_ALLOW (its errors do not
// name the variable: the configuration reader does).
func (a *WebhookAllow) UnmarshalText(b []byte) error {
	v, err := parseWebhookAllow(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// String lists the allowlist as ParseWebhookAllow reads it.
func (a WebhookAllow) String() string {
	var s []string
	for _, p := range a.prefixes {
		s = append(s, p.String())
	}
	return strings.Join(append(s, a.hosts...), ",")
}

func (a WebhookAllow) allowsHost(host string) bool {
	return slices.Contains(a.hosts, canonicalHost(host))
}

func (a WebhookAllow) allowsAddr(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	for _, p := range a.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// CheckWebhookURL refuses a webhook URL that Validate accepts but whose host is, or
// resolves to (through r; nil means the system's resolver), an address that webhooks may
// not reach under allow. Errors are *ValidationError for webhook_url.
func CheckWebhookURL(ctx context.Context, raw string, allow WebhookAllow, r Resolver) error {
	u, err := url.Parse(raw)
	if err != nil {
		return invalid("webhook_url", "is not a URL")
	}
	host := u.Hostname()
	_, isIP, err := allow.checkHost(host)
	if err != nil {
		return &ValidationError{Field: "webhook_url", Msg: err.Error()}
	}
	if isIP || allow.allowsHost(host) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, WebhookLookupTimeout)
	defer cancel()
	addrs, err := resolver(r).LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil // not known to be internal; the worker checks again when it connects
	}
	if err := allow.checkResolved(host, addrs); err != nil {
		return &ValidationError{Field: "webhook_url", Msg: err.Error()}
	}
	return nil
}

func resolver(r Resolver) Resolver {
	if r == nil {
		return net.DefaultResolver
	}
	return r
}

// DialContext returns a dial function for an http.Transport that sends webhooks: it
// resolves the host once (through r; nil means the system's resolver), refuses it if it
// or any of its addresses is internal and not allowed, and connects to the checked
// addresses alone. d's Control checks each address again as the socket connects.
func (a WebhookAllow) DialContext(r Resolver, d net.Dialer) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		ip, isIP, err := a.checkHost(host)
		if err != nil {
			return nil, err
		}
		addrs := []netip.Addr{ip}
		hostAllowed := !isIP && a.allowsHost(host)
		if !isIP {
			if addrs, err = resolver(r).LookupNetIP(ctx, "ip", host); err != nil {
				return nil, err
			}
			if !hostAllowed {
				if err := a.checkResolved(host, addrs); err != nil {
					return nil, err
				}
			}
		}
		var firstErr error
		for _, ip := range addrs {
			if network == "tcp4" && !ip.Unmap().Is4() || network == "tcp6" && ip.Unmap().Is4() {
				continue
			}
			dial := d
			dial.Control = func(_, addr string, _ syscall.RawConn) error {
				// The last look, at the address the socket connects to.
				ap, err := netip.ParseAddrPort(addr)
				if err != nil {
					return fmt.Errorf("webhook: connecting to %q: %w", addr, err)
				}
				if hostAllowed {
					return nil
				}
				if ap.Addr().Unmap() != ip.Unmap() {
					return &WebhookAddressError{Host: host, Why: "was to connect to " + ip.String() + " but connects to " + ap.Addr().String()}
				}
				if why := a.refusedAddr(ap.Addr()); why != "" {
					return &WebhookAddressError{Host: host, Why: why}
				}
				return nil
			}
			conn, err := dial.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
			if err == nil {
				return conn, nil
			}
			if firstErr == nil {
				firstErr = err
			}
		}
		if firstErr == nil {
			firstErr = fmt.Errorf("webhook: host %q has no %s address", host, network)
		}
		return nil, firstErr
	}
}

// checkHost applies the rules that need no lookup. For an IP literal it returns the
// address and isIP.
func (a WebhookAllow) checkHost(host string) (ip netip.Addr, isIP bool, err error) {
	if msg := hostSpellingProblem(host); msg != "" {
		return netip.Addr{}, false, &WebhookAddressError{Host: host, Why: msg}
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if why := a.refusedAddr(ip); why != "" {
			return ip, true, &WebhookAddressError{Host: host, Why: why}
		}
		return ip, true, nil
	}
	if a.allowsHost(host) {
		return netip.Addr{}, false, nil
	}
	if why := internalName(canonicalHost(host)); why != "" {
		return netip.Addr{}, false, &WebhookAddressError{Host: host, Why: why}
	}
	return netip.Addr{}, false, nil
}

// checkResolved refuses host if any of its addresses is internal and not allowed: the
// transport could pick any of them.
func (a WebhookAllow) checkResolved(host string, addrs []netip.Addr) error {
	for _, ip := range addrs {
		if why := a.refusedAddr(ip); why != "" {
			return &WebhookAddressError{Host: host, Why: "resolves to " + strings.TrimPrefix(why, "is ")}
		}
	}
	return nil
}

// refusedAddr says why ip is refused, or "" when webhooks may reach it.
func (a WebhookAllow) refusedAddr(ip netip.Addr) string {
	if a.allowsAddr(ip) {
		return ""
	}
	if why := internalAddr(ip); why != "" {
		return "is " + why
	}
	return ""
}

// internalRanges are the addresses webhooks do not reach by default: everything that is
// not a public unicast address. The first match names the range.
var internalRanges = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified (this-network) address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT (shared) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address (cloud metadata services live there)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved or broadcast address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique-local address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// IPv6 ranges that carry an IPv4 address, which a gateway or the kernel may reach.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// internalAddr names the internal range ip is in, or "" for a public address.
func internalAddr(ip netip.Addr) string {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		if why := internalAddr(ip.Unmap()); why != "" {
			return "the IPv4-mapped form of " + why
		}
		return ""
	}
	if ip.Is6() {
		b := ip.As16()
		var v4 netip.Addr
		switch {
		case nat64.Contains(ip):
			v4 = netip.AddrFrom4([4]byte(b[12:16]))
		case sixToFour.Contains(ip):
			v4 = netip.AddrFrom4([4]byte(b[2:6]))
		}
		if v4.IsValid() {
			if why := internalAddr(v4); why != "" {
				return "an IPv6 form (NAT64 or 6to4) of " + why
			}
		}
	}
	for _, r := range internalRanges {
		if r.prefix.Contains(ip) {
			return r.what
		}
	}
	return ""
}

// metadataNames are the names of cloud metadata services (GCP, AWS, Tencent), refused
// whatever they resolve to; the others are reached by address (169.254.169.254, and
// Alibaba's 100.100.100.200), which internalRanges refuses.
var metadataNames = []string{
	"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
	"instance-data.ec2.internal", "metadata.tencentyun.com",
}

// internalSuffixes are name spaces that never hold a public receiver.
var internalSuffixes = []string{".localhost", ".local", ".internal", ".home.arpa", ".localdomain", ".intranet", ".lan"}

// internalName says why a (canonical) host name is refused before any lookup, or "".
func internalName(h string) string {
	switch {
	case slices.Contains(metadataNames, h):
		return "is a cloud metadata service's name"
	case h == "localhost" || h == "localhost.localdomain" || h == "ip6-localhost" || h == "ip6-loopback":
		return "is a loopback name"
	case !strings.Contains(h, "."):
		return "is a single-label name, resolved through the worker's own search domains"
	}
	for _, s := range internalSuffixes {
		if strings.HasSuffix(h, s) {
			return "is in " + s[1:] + ", a name space for internal hosts"
		}
	}
	return ""
}

// hostSpellingProblem refuses spellings of a host that resolvers read differently than
// they look, whatever the allowlist says: IPv4 written as an integer, in octal or hex, or
// with fewer than four parts (inet_aton reads "2130706433", "0x7f.1" and "0177.0.0.1" as
// 127.0.0.1); IPv6 zones; and names outside ASCII, which IDNA maps to other names.
func hostSpellingProblem(host string) string {
	if host == "" {
		return "is empty"
	}
	for i := 0; i < len(host); i++ {
		if host[i] >= 0x80 {
			return "is not ASCII: write an international name in its xn-- (punycode) form"
		}
	}
	if strings.Contains(host, "%") {
		return "has an IPv6 zone"
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	h := canonicalHost(host)
	labels := strings.Split(h, ".")
	if numericLabel(labels[len(labels)-1]) {
		return "is not a dotted-decimal IPv4 address (a.b.c.d, without leading zeros); integer, octal and hex spellings are refused"
	}
	if !validHostName(h) {
		return "is not a valid host name"
	}
	return ""
}

// numericLabel is a label that URL parsers and inet_aton read as a number: decimal digits,
// or 0x and hex digits.
func numericLabel(l string) bool {
	if l == "" {
		return false
	}
	if rest, ok := strings.CutPrefix(strings.ToLower(l), "0x"); ok {
		return strings.Trim(rest, "0123456789abcdef") == ""
	}
	return strings.Trim(l, "0123456789") == ""
}

// canonicalHost lower-cases a host name and drops the root's trailing dot.
func canonicalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// validHostName: LDH labels of 1…63 bytes (underscores too, as some internal names have),
// at most 253 bytes in all.
func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
