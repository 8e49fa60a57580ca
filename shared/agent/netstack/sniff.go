package netstack

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// sniffMax bounds what is read ahead for a name: a TLS record's largest
// size and its header (a ClientHello fits one record), which also holds
// any sane HTTP request head.
const sniffMax = 16<<10 + 5

// sniffWait is how long the rest of a ClientHello or request head is
// waited for once its first bytes came; past it the bytes go through
// without a name.
const sniffWait = 3 * time.Second

// sniff reads the first bytes the environment sends on a connection and
// returns them (they are still to be forwarded) with the name they carry:
// a TLS ClientHello's server name ("sni") or an HTTP request's Host
// ("host"). Protocols where the server speaks first never get here before
// the client has something to send, and what is neither comes back at
// once, nameless.
func sniff(c net.Conn) (head []byte, name, from string, err error) {
	buf := make([]byte, 0, 4096)
	read := func() error {
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), min(2*cap(buf), sniffMax))
			copy(nb, buf)
			buf = nb
		}
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		return err
	}
	if err := read(); err != nil {
		return buf, "", "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(sniffWait))
	defer c.SetReadDeadline(time.Time{})
	switch {
	case buf[0] == 0x16: // a TLS handshake record
		for len(buf) < 5 || len(buf) < 5+int(buf[3])<<8|int(buf[4]) {
			if len(buf) >= sniffMax || read() != nil {
				return buf, "", "", nil
			}
		}
		if n := serverName(buf); n != "" {
			return buf, n, "sni", nil
		}
	case httpMethod(buf):
		for !bytes.Contains(buf, []byte("\r\n\r\n")) {
			if len(buf) >= sniffMax || read() != nil {
				return buf, "", "", nil
			}
		}
		if r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(buf))); err == nil && r.Host != "" {
			h := r.Host
			if host, _, err := net.SplitHostPort(h); err == nil {
				h = host
			}
			return buf, strings.ToLower(strings.Trim(h, "[]")), "host", nil
		}
	}
	return buf, "", "", nil
}

func httpMethod(b []byte) bool {
	for _, m := range []string{"GET ", "POST ", "PUT ", "HEAD ", "DELETE ", "OPTIONS ", "PATCH ", "TRACE ", "CONNECT "} {
		if len(b) >= len(m) && string(b[:len(m)]) == m || len(b) < len(m) && strings.HasPrefix(m, string(b)) {
			return true
		}
	}
	return false
}

var errSniffed = errors.New("sniffed")

// serverName is the SNI of the ClientHello in record, read by crypto/tls
// itself on a connection that replays record and drops what it writes.
func serverName(record []byte) string {
	var name string
	conn := tls.Server(&replay{r: bytes.NewReader(record)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name = h.ServerName
			return nil, errSniffed
		},
	})
	_ = conn.Handshake()
	return strings.ToLower(name)
}

// replay is a net.Conn that reads a buffer and writes nowhere.
type replay struct {
	net.Conn
	r io.Reader
}

func (c *replay) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *replay) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replay) Close() error                     { return nil }
func (c *replay) SetDeadline(time.Time) error      { return nil }
func (c *replay) SetReadDeadline(time.Time) error  { return nil }
func (c *replay) SetWriteDeadline(time.Time) error { return nil }
func (c *replay) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *replay) LocalAddr() net.Addr              { return &net.TCPAddr{} }
