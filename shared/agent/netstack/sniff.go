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
// returns them (they are still to be forwarded) with what they are: kind
// is "sni" when they start a TLS handshake and "host" when they start an
// HTTP request, and name the server name or Host they carry. A kind with
// no name (a ClientHello split across records, silence after the first
// bytes, a request without a Host, HTTP/2 with prior knowledge) is for
// the caller to decide on the address alone: going ahead under the names
// the address resolved from would let a name the rules deny through.
// Protocols where the server speaks first never get here before the
// client has something to send, and what is neither comes back at once
// with no kind.
func sniff(c net.Conn) (head []byte, name, kind string, err error) {
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
	// more reads on until done says so, or the bound, the wait or an
	// error stops it (false).
	more := func(done func() bool) bool {
		for !done() {
			if len(buf) >= sniffMax || read() != nil {
				return false
			}
		}
		return true
	}
	switch {
	case buf[0] == 0x16: // a TLS handshake record
		if !more(func() bool { return len(buf) >= 5 && len(buf) >= 5+(int(buf[3])<<8|int(buf[4])) }) {
			return buf, "", "sni", nil
		}
		return buf, serverName(buf), "sni", nil
	case requestLineStart(buf):
		// The request line says whether it is HTTP at all (any method:
		// one this does not know is HTTP all the same).
		if !more(func() bool { return bytes.Contains(buf, []byte("\r\n")) || !requestLineStart(buf) }) {
			if requestLineStart(buf) && bytes.IndexByte(buf, ' ') > 0 {
				// A method and a space, then silence: treated as HTTP.
				return buf, "", "host", nil
			}
			return buf, "", "", nil
		}
		if !isRequestLine(buf) {
			return buf, "", "", nil
		}
		if !more(func() bool { return bytes.Contains(buf, []byte("\r\n\r\n")) }) {
			return buf, "", "host", nil
		}
		if r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(buf))); err == nil && r.Host != "" {
			h := r.Host
			if host, _, err := net.SplitHostPort(h); err == nil {
				h = host
			}
			return buf, strings.ToLower(strings.Trim(h, "[]")), "host", nil
		}
		return buf, "", "host", nil
	}
	return buf, "", "", nil
}

// maxMethod bounds an HTTP method's length (the longest registered ones
// have 17 letters).
const maxMethod = 24

// requestLineStart says whether b can be the start of an HTTP request
// line: a method (upper-case letters, digits or '-', '_') and, once it
// came, a space. Where b ends before the space it may still become one.
func requestLineStart(b []byte) bool {
	for i, c := range b {
		switch {
		case c == ' ':
			return i > 0
		case i >= maxMethod:
			return false
		case 'A' <= c && c <= 'Z', '0' <= c && c <= '9' && i > 0, c == '-', c == '_':
		default:
			return false
		}
	}
	return len(b) > 0
}

// isRequestLine says whether b's first line is an HTTP request line:
// METHOD SP target SP HTTP/major.minor.
func isRequestLine(b []byte) bool {
	line, _, ok := bytes.Cut(b, []byte("\r\n"))
	if !ok || !requestLineStart(line) {
		return false
	}
	parts := bytes.Split(line, []byte(" "))
	if len(parts) != 3 || len(parts[1]) == 0 {
		return false
	}
	_, _, ok = http.ParseHTTPVersion(string(parts[2]))
	return ok
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
