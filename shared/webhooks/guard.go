package webhooks

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// A webhook's URL must be HTTPS on a public address, checked twice: when the
// webhook is created (the literal address, or every address its name
// resolves to) and on every delivery, on the very address being dialed (a
// net.Dialer Control function), so a name that resolves to a public address
// at creation and to a private one later (DNS rebinding) is still refused.

// blocked are the address ranges no delivery may reach, with the name each
// refusal gives.
var blocked = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("192.88.99.0/24"), "reserved"}, // the old 6to4 relay anycast
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "reserved"},     // IPv4-compatible (deprecated): ::10.0.0.1
	{netip.MustParsePrefix("100::/64"), "reserved"},  // discard-only
	{netip.MustParsePrefix("2001::/32"), "reserved"}, // Teredo: a tunnel to an address it hides
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "reserved"}, // local-use NAT64: translates into private networks
	{netip.MustParsePrefix("fc00::/7"), "unique local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// IPv6 forms that carry an IPv4 address. Only the IPv4-mapped form
// (::ffff:a.b.c.d) is judged by the address inside: it is not an IPv6
// destination at all but the socket API's spelling of an IPv4 one, so the
// dialer connects over IPv4 to exactly that address and the IPv4 rules are
// exact. Every other form is refused whatever it carries: whether a packet to
// it reaches the embedded host, or another one, is decided by a translator or
// relay on the path (a NAT64 gateway or SIIT translator in the service's own
// network, a 6to4 or Teredo relay), which the guard cannot see, and a
// receiver that has an IPv4 address publishes it as such. Decoding them would
// trust rules this guard cannot check; refusing costs no real receiver.
// The IPv4-compatible form (::/96), Teredo (2001::/32) and local-use NAT64
// (64:ff9b:1::/48) are in blocked; the forms below name the embedded
// address's class when it has one, so the refusal says what it would reach.
var embedding = []struct {
	prefix netip.Prefix
	at     int // the byte the IPv4 address starts at
	form   string
}{
	{netip.MustParsePrefix("::ffff:0:0:0/96"), 12, "IPv4-translated"}, // SIIT (RFC 2765)
	{netip.MustParsePrefix("64:ff9b::/96"), 12, "NAT64"},              // well-known NAT64 prefix (RFC 6052)
	{netip.MustParsePrefix("2002::/16"), 2, "6to4"},                   // RFC 3056, deprecated (RFC 7526)
}

// AddressClass returns why ip may not receive deliveries ("loopback",
// "private", ...), or "" for a public address. allowLoopback lets loopback
// through (the devserver's local receivers), never through an IPv4-embedding
// form other than the mapped one.
func AddressClass(ip netip.Addr, allowLoopback bool) string {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		// ::ffff:10.0.0.1 is 10.0.0.1.
		ip = ip.Unmap()
	}
	if ip.Is6() {
		b := ip.As16()
		for _, e := range embedding {
			if e.prefix.Contains(ip) {
				v4 := netip.AddrFrom4([4]byte{b[e.at], b[e.at+1], b[e.at+2], b[e.at+3]})
				if class := AddressClass(v4, false); class != "" {
					return class
				}
				return e.form
			}
		}
	}
	if ip == netip.IPv4Unspecified() || ip == netip.MustParseAddr("255.255.255.255") {
		return "unspecified"
	}
	for _, b := range blocked {
		if b.prefix.Contains(ip) {
			if b.class == "loopback" && allowLoopback {
				return ""
			}
			return b.class
		}
	}
	if !ip.IsValid() {
		return "invalid"
	}
	return ""
}

// Guard checks webhook URLs and dials deliveries.
type Guard struct {
	// AllowLocal accepts http:// URLs and loopback addresses: for a local
	// stack whose receiver runs on the same machine. Never set in AWS.
	AllowLocal bool
	// Resolver looks names up at creation; nil is net.DefaultResolver.
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
}

// MaxURLLen bounds a webhook URL.
const MaxURLLen = 2048

// CheckURL refuses, with 422 naming `url`, a URL that is not HTTPS (HTTP too
// with AllowLocal) or whose host is, or resolves to, an address that is not
// public. It returns the URL as it will be stored.
func (g Guard) CheckURL(ctx context.Context, raw string) (string, error) {
	bad := func(format string, args ...any) error { return domain.Invalid("url", format, args...) }
	if raw == "" {
		return "", bad("url is required")
	}
	if len(raw) > MaxURLLen {
		return "", bad("url must be at most %d characters", MaxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "", bad("url must be an absolute https:// URL")
	}
	if u.User != nil {
		return "", bad("url must not carry credentials; the signature authenticates deliveries")
	}
	if u.Fragment != "" {
		return "", bad("url must not have a fragment")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && g.AllowLocal:
	default:
		return "", bad("url must use https")
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if class := AddressClass(ip, g.AllowLocal); class != "" {
			return "", bad("url must be on a public address; %s is %s", host, class)
		}
		return u.String(), nil
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		if !g.AllowLocal {
			return "", bad("url must be on a public address; %s is loopback", host)
		}
	}
	var res interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	} = net.DefaultResolver
	if g.Resolver != nil {
		res = g.Resolver
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := res.LookupNetIP(lctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return "", bad("url's host %s does not resolve", host)
	}
	for _, ip := range addrs {
		if class := AddressClass(ip, g.AllowLocal); class != "" {
			return "", bad("url must be on a public address; %s resolves to %s, which is %s", host, ip, class)
		}
	}
	return u.String(), nil
}

// errRefused is what a delivery to a refused address fails with.
var errRefused = errors.New("refused address")

// control refuses a connection to any address that is not public, on the
// address actually being dialed, after DNS.
func (g Guard) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", errRefused, address)
	}
	if class := AddressClass(ap.Addr(), g.AllowLocal); class != "" {
		return fmt.Errorf("%w: %s is %s", errRefused, ap.Addr(), class)
	}
	return nil
}

// Client is the HTTP client of deliveries: every connection goes through the
// guard's dialer, no proxy from the environment, no redirects followed (a
// 3xx counts as a failed attempt), and a bounded wait for an answer.
func (g Guard) Client(timeout time.Duration, tlsConfig *tls.Config) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, Control: g.control}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       30 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
