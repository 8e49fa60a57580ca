package tunnel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// Protocol is the HTTP upgrade a client asks for first. After the agent's
// 101 the connection carries the yamux session's bytes as they are: no
// WebSocket framing, and no masking of every byte the client sends, which
// is where most of a WebSocket tunnel's time went. A client falls back to
// a WebSocket when the upgrade is not answered with 101 (an agent without
// it, or a proxy that passes on nothing but WebSockets); the ticket and
// the agent's checks are the same either way.
const Protocol = "envlease-tunnel"

// UpgradeDialer dials with hc (nil: a plain http.Client, so the
// environment's proxy settings apply as to any HTTP request): the
// Protocol upgrade, or a WebSocket (WebSocketDialer) when that is not
// answered with a 101 or a refusal of the ticket. It is what Dial and
// Forward use unless told otherwise.
func UpgradeDialer(hc *http.Client) Dialer {
	ws := WebSocketDialer(hc)
	return func(ctx context.Context, url string, header http.Header) (net.Conn, error) {
		c, err := upgrade(ctx, hc, url, header)
		var re *RefusedError
		if err == nil || errors.As(err, &re) {
			return c, err
		}
		// Anything else (a proxy that passes on nothing but WebSockets, an
		// agent without the upgrade, HTTP/2 in the way): a WebSocket says
		// what is wrong if it fails too.
		return ws(ctx, url, header)
	}
}

func upgrade(ctx context.Context, hc *http.Client, url string, header http.Header) (net.Conn, error) {
	u := url
	switch {
	case strings.HasPrefix(u, "ws://"):
		u = "http://" + u[len("ws://"):]
	case strings.HasPrefix(u, "wss://"):
		u = "https://" + u[len("wss://"):]
	}
	c := http.Client{}
	if hc != nil {
		c = *hc
	}
	if c.Timeout > 0 {
		// A client timeout would cut the upgraded connection's reads too:
		// it bounds the handshake only.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
		c.Timeout = 0
	}
	// An upgrade is HTTP/1.1's: over TLS, ALPN would otherwise pick HTTP/2,
	// which has no upgrades.
	if t, ok := c.Transport.(*http.Transport); ok || c.Transport == nil {
		if !ok {
			t = http.DefaultTransport.(*http.Transport)
		}
		t = t.Clone()
		t.Protocols = new(http.Protocols)
		t.Protocols.SetHTTP1(true)
		if t.TLSClientConfig != nil {
			t.TLSClientConfig = t.TLSClientConfig.Clone()
			t.TLSClientConfig.NextProtos = []string{"http/1.1"}
		}
		defer t.CloseIdleConnections() // an answer other than 101 leaves its connection idle
		c.Transport = t
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", Protocol)
	res, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	switch res.StatusCode {
	case http.StatusSwitchingProtocols:
		rwc, ok := res.Body.(io.ReadWriteCloser)
		if !ok || !strings.EqualFold(res.Header.Get("Upgrade"), Protocol) {
			res.Body.Close()
			return nil, fmt.Errorf("tunnel: %s answered the upgrade to %s with %q", url, Protocol, res.Header.Get("Upgrade"))
		}
		return &upgraded{rwc: rwc}, nil
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusServiceUnavailable:
		defer res.Body.Close()
		return nil, refused(res)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 4096))
	res.Body.Close()
	return nil, fmt.Errorf("tunnel: %s answered the upgrade to %s with %s", url, Protocol, res.Status)
}

// upgraded is the connection of an upgraded HTTP response as a net.Conn.
// yamux keeps its own timers, so it needs no deadlines, and has none.
type upgraded struct {
	rwc io.ReadWriteCloser
}

func (c *upgraded) Read(b []byte) (int, error)       { return c.rwc.Read(b) }
func (c *upgraded) Write(b []byte) (int, error)      { return c.rwc.Write(b) }
func (c *upgraded) Close() error                     { return c.rwc.Close() }
func (c *upgraded) LocalAddr() net.Addr              { return upgradedAddr{} }
func (c *upgraded) RemoteAddr() net.Addr             { return upgradedAddr{} }
func (c *upgraded) SetDeadline(time.Time) error      { return errors.ErrUnsupported }
func (c *upgraded) SetReadDeadline(time.Time) error  { return errors.ErrUnsupported }
func (c *upgraded) SetWriteDeadline(time.Time) error { return errors.ErrUnsupported }

type upgradedAddr struct{}

func (upgradedAddr) Network() string { return "tcp" }
func (upgradedAddr) String() string  { return Protocol }

// Accept answers a tunnel request the agent has authorized: the Protocol
// upgrade when it asks for that (the connection is then the request's own
// TCP connection), else a WebSocket. On an error the request has been
// answered.
func Accept(w http.ResponseWriter, r *http.Request) (net.Conn, error) {
	if !wantsUpgrade(r) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return nil, err
		}
		return websocket.NetConn(context.Background(), ws, websocket.MessageBinary), nil
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot upgrade this connection: "+err.Error(), http.StatusInternalServerError)
		return nil, err
	}
	// The server's header and write timeouts were for the request.
	_ = conn.SetDeadline(time.Time{})
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + Protocol + "\r\n\r\n"); err != nil {
		conn.Close()
		return nil, err
	}
	if err := brw.Flush(); err != nil {
		conn.Close()
		return nil, err
	}
	if brw.Reader.Buffered() > 0 {
		return &readerConn{Conn: conn, r: brw.Reader}, nil
	}
	return conn, nil
}

// wantsUpgrade reports whether r asks for the Protocol upgrade.
func wantsUpgrade(r *http.Request) bool {
	if r.ProtoMajor != 1 || !strings.EqualFold(strings.TrimSpace(r.Header.Get("Upgrade")), Protocol) {
		return false
	}
	for _, v := range r.Header.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// readerConn reads what the server had buffered before the connection's
// own bytes.
type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }
