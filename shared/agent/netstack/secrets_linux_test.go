//go:build linux

package netstack

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/netpolicy"
)

// The boundary adds a bound secret to HTTPS requests to exactly the bound
// host: the environment sees a certificate of its own CA for it, the real
// server (verified against the roots the test gives) gets the header, and
// the record names the secret; another host's TLS passes untouched (the
// environment sees the server's own certificate, the server no header); a
// request for another Host on the bound connection gets 421 and no
// secret; a server the boundary cannot verify gets nothing.
func TestBoundaryAddsSecrets(t *testing.T) {
	needRoot(t)
	const value = "s3cr3t-value-for-the-test"
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+"|"+r.Header.Get("X-Token"))
		mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	// A server whose certificate no root of the boundary's signed.
	untrusted := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, "untrusted|"+r.Header.Get("X-Token"))
		mu.Unlock()
	}))
	other, err := newInterceptor(Secrets{Bindings: []SecretBinding{{Hosts: []string{"bad.example.com"}}}}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := other.leaf("bad.example.com")
	if err != nil {
		t.Fatal(err)
	}
	untrusted.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	untrusted.StartTLS()
	t.Cleanup(untrusted.Close)
	serverRoots := x509.NewCertPool()
	serverRoots.AddCert(srv.Certificate())

	bound, otherAddr, bad := netip.MustParseAddr("198.18.0.30"), netip.MustParseAddr("198.18.0.31"), netip.MustParseAddr("198.18.0.32")
	res := fakeResolver{"api.example.com": {bound}, "www.example.com": {otherAddr}, "bad.example.com": {bad}}
	p := netpolicy.Layers{netpolicy.MustCompile(netpolicy.ModeRules, netpolicy.Rules{Allow: []string{"*.example.com"}})}
	e := newEnv(t, p, res, func(c *Config) {
		c.Secrets = &Secrets{
			Bindings: []SecretBinding{{Secret: "TOK", Hosts: []string{"api.example.com", "bad.example.com"}, Header: "X-Token", Value: "t {secret}"}},
			Value: func(name string) (string, bool) {
				return value, name == "TOK"
			},
			Roots: serverRoots,
		}
		c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			to := srv.Listener.Addr().String()
			if strings.HasPrefix(addr, bad.String()+":") {
				to = untrusted.Listener.Addr().String()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, to)
		}
	})
	// The environment resolves the names first, as a program does: the
	// rules allow the addresses of the names it resolved.
	for _, n := range []string{"api.example.com", "www.example.com", "bad.example.com"} {
		if _, err := e.resolver(t).LookupNetIP(context.Background(), "ip4", n); err != nil {
			t.Fatal(err)
		}
	}
	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(e.b.CACert()) {
		t.Fatal("no CA certificate")
	}
	both := ca.Clone()
	both.AddCert(srv.Certificate())
	client := func(roots *x509.CertPool, ip netip.Addr) *http.Client {
		return &http.Client{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return e.dialIn(t, network, net.JoinHostPort(ip.String(), "443"))
			},
		}}
	}
	get := func(c *http.Client, url string) (string, error) {
		res, err := c.Get(url)
		if err != nil {
			return "", err
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		// The connection's record is written when it ends.
		c.CloseIdleConnections()
		return res.Status + " " + string(b), nil
	}
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return ""
		}
		return seen[len(seen)-1]
	}

	t.Run("bound host", func(t *testing.T) {
		// Only the environment's CA: the certificate it is shown is its CA's.
		if out, err := get(client(ca, bound), "https://api.example.com/x"); err != nil || out != "200 OK ok" {
			t.Fatalf("%q %v", out, err)
		}
		if got := last(); got != "api.example.com|t "+value {
			t.Fatalf("the server saw %q", got)
		}
		r, ok := e.log.find(func(x Record) bool { return x.Name == "api.example.com" && x.Proto == ProtoTCP })
		if !ok || !slices.Equal(r.Secrets, []string{"TOK"}) || strings.Contains(e.log.String(), value) {
			t.Fatalf("record %+v\n%s", r, e.log)
		}
	})
	t.Run("another host is not touched", func(t *testing.T) {
		// Only the server's own certificate: it is what the environment sees.
		if out, err := get(client(serverRoots, otherAddr), "https://www.example.com/y"); err != nil || out != "200 OK ok" {
			t.Fatalf("%q %v", out, err)
		}
		if got := last(); got != "www.example.com|" {
			t.Fatalf("the server saw %q", got)
		}
		if _, err := get(client(ca, otherAddr), "https://www.example.com/y"); err == nil {
			t.Fatal("the environment's CA signed for a host no secret is bound to")
		}
		r, ok := e.log.find(func(x Record) bool { return x.Name == "www.example.com" && x.Proto == ProtoTCP })
		if !ok || len(r.Secrets) != 0 {
			t.Fatalf("record %+v", r)
		}
	})
	t.Run("another Host on the bound connection", func(t *testing.T) {
		c, err := e.dialIn(t, "tcp", net.JoinHostPort(bound.String(), "443"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		tc := tls.Client(c, &tls.Config{ServerName: "api.example.com", RootCAs: ca})
		before := last()
		fmt.Fprint(tc, "GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || res.StatusCode != http.StatusMisdirectedRequest {
			t.Fatalf("%v %v", res, err)
		}
		if last() != before {
			t.Fatalf("the server saw %q", last())
		}
	})
	t.Run("a server that does not verify gets nothing", func(t *testing.T) {
		before := last()
		if _, err := get(client(both, bad), "https://bad.example.com/z"); err == nil {
			t.Fatal("answered through an unverified server")
		}
		if last() != before {
			t.Fatalf("the unverified server saw %q", last())
		}
		if _, ok := e.log.find(func(x Record) bool {
			return x.Name == "bad.example.com" && strings.Contains(x.Error, "server's TLS handshake failed")
		}); !ok {
			t.Fatalf("no record of the refusal:\n%s", e.log)
		}
	})
}
