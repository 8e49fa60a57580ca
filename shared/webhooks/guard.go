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
	"github.com/envlease/envlease/shared/netguard"
)

// A webhook's URL must be HTTPS on a public address, checked twice: when the
// webhook is created (the literal address, or every address its name
// resolves to) and on every delivery, on the very address being dialed (a
// net.Dialer Control function), so a name that resolves to a public address
// at creation and to a private one later (DNS rebinding) is still refused.

// AddressClass returns why ip may not receive deliveries ("loopback",
// "private", ...), or "" for a public address; see netguard.Class.
func AddressClass(ip netip.Addr, allowLoopback bool) string {
	return netguard.Class(ip, allowLoopback)
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
