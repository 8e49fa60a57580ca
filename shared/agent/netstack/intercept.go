package netstack

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// interceptHandshake bounds each TLS handshake of an intercepted
// connection.
const interceptHandshake = 15 * time.Second

// intercept serves a TLS connection to a host a secret is bound to (its
// ClientHello, head, already read): the environment's side is terminated
// with a certificate of the environment's CA, the node's side re-encrypted
// to the real server, verified against the system's roots; each HTTP
// request in between gets the bound secrets added. Nothing else of the
// connection changes. The secrets' names, never their values, go into the
// flow's record.
func (b *Boundary) intercept(f *flow, head []byte, host string) {
	envRaw := &headConn{Conn: f.in, r: io.MultiReader(bytes.NewReader(head), f.in)}
	in := countedConn{Conn: envRaw, read: &f.sent}
	out := countedConn{Conn: f.out, read: &f.received}
	leaf, err := b.sec.leaf(host)
	if err != nil {
		b.interceptFailed(f, fmt.Sprintf("certificate for %s: %v", host, err))
		return
	}
	env := tls.Server(in, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	ctx, cancel := context.WithTimeout(b.ctx, interceptHandshake)
	err = env.HandshakeContext(ctx)
	cancel()
	if err != nil {
		// The environment did not trust its CA, or went away: nothing
		// was sent to the server.
		b.interceptFailed(f, "the environment's TLS handshake failed: "+err.Error())
		return
	}
	srv := tls.Client(out, &tls.Config{ServerName: host, RootCAs: b.sec.sec.Roots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	ctx, cancel = context.WithTimeout(b.ctx, interceptHandshake)
	err = srv.HandshakeContext(ctx)
	cancel()
	if err != nil {
		b.interceptFailed(f, "the server's TLS handshake failed (its certificate is verified against the system's roots): "+err.Error())
		return
	}
	errText := b.proxyRequests(f, env, srv, host)
	f.finish(errText)
}

// proxyRequests passes requests and their answers between env and srv
// until either side ends, adding the secrets to each request. A request
// for another host than the connection's server name gets 421 and no
// secret: a bound host's connection carries nothing for another. An
// upgrade (a WebSocket) becomes a plain copy both ways after the 101.
func (b *Boundary) proxyRequests(f *flow, env, srv *tls.Conn, host string) string {
	er, sr := bufio.NewReader(env), bufio.NewReader(srv)
	for {
		req, err := http.ReadRequest(er)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return ""
			}
			return "reading the environment's request: " + err.Error()
		}
		reqHost := strings.ToLower(req.Host)
		if h, _, err := net.SplitHostPort(reqHost); err == nil {
			reqHost = h
		}
		if reqHost != host {
			misdirected(env, req)
			return fmt.Sprintf("a request for %s on the connection to %s: refused with 421, no secret added", req.Host, host)
		}
		names, err := b.sec.apply(host, req.Header)
		if err != nil {
			req.Body.Close()
			unavailable(env)
			return err.Error()
		}
		b.mu.Lock()
		for _, n := range names {
			if !contains(f.secrets, n) {
				f.secrets = append(f.secrets, n)
			}
		}
		b.mu.Unlock()
		if err := req.Write(srv); err != nil {
			return "sending the request: " + err.Error()
		}
		resp, err := http.ReadResponse(sr, req)
		if err != nil {
			return "reading the server's answer: " + err.Error()
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			// The body of a 101 is the connection itself.
			if err := resp.Write(env); err != nil {
				return err.Error()
			}
			return copyBoth(env, er, srv, sr)
		}
		werr := resp.Write(env)
		resp.Body.Close()
		if werr != nil {
			return "" // the environment went away
		}
		if req.Close || resp.Close {
			return ""
		}
	}
}

// copyBoth copies an upgraded connection both ways, each reader's
// buffered bytes first.
func copyBoth(env *tls.Conn, er *bufio.Reader, srv *tls.Conn, sr *bufio.Reader) string {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(env, sr)
		_ = env.CloseWrite()
	}()
	_, _ = io.Copy(srv, er)
	_ = srv.CloseWrite()
	wg.Wait()
	return ""
}

func misdirected(w io.Writer, req *http.Request) {
	req.Body.Close()
	body := "this connection serves only the host its TLS server name named\n"
	fmt.Fprintf(w, "HTTP/1.1 421 Misdirected Request\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

func unavailable(w io.Writer) {
	body := "the network boundary does not hold the secret this host is bound to\n"
	fmt.Fprintf(w, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

// interceptFailed ends an intercepted flow that could not be served.
func (b *Boundary) interceptFailed(f *flow, why string) {
	f.finish(why)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// headConn is a connection whose first bytes were read ahead.
type headConn struct {
	net.Conn
	r io.Reader
}

func (c *headConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// countedConn counts what is read from a connection.
type countedConn struct {
	net.Conn
	read interface{ Add(int64) int64 }
}

func (c countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}
