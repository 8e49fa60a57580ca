package tunnel

import (
	"encoding/binary"
	"net"
	"sync"
)

// yamux frames: a 12-byte header (version, type, flags, stream, length),
// followed, for a data frame, by length bytes of body.
const (
	frameHeader = 12
	frameData   = 0
	// joinBody is the largest body copied behind its header to go out in
	// one write where the connection cannot gather (WebSocket, or the
	// upgraded body of an HTTP response): copying a small body costs less
	// than a write of its own, a large one more.
	joinBody = 64 << 10
)

var joinBufs = sync.Pool{New: func() any { b := make([]byte, 0, frameHeader+joinBody); return &b }}

// frameConn is the connection a yamux session writes to: yamux writes a
// data frame's header and body separately, which on a fast stream is half
// of its writes, one WebSocket message each, and on a TCP connection an
// extra segment each. frameConn holds the header back and sends it with
// the body: gathered in one system call on a TCP connection, else copied
// together when the body is small. Every other write passes straight
// through. Only yamux's send loop writes, so holding a header is safe.
type frameConn struct {
	net.Conn
	hdr  [frameHeader]byte
	held bool
}

// MuxConn is the connection a yamux session of a tunnel runs on over c
// (both ends wrap theirs).
func MuxConn(c net.Conn) net.Conn { return &frameConn{Conn: c} }

func (c *frameConn) Write(p []byte) (int, error) {
	if !c.held {
		if len(p) == frameHeader && p[1] == frameData && binary.BigEndian.Uint32(p[8:]) > 0 {
			copy(c.hdr[:], p)
			c.held = true
			return len(p), nil
		}
		return c.Conn.Write(p)
	}
	c.held = false
	if _, ok := c.Conn.(*net.TCPConn); ok {
		bufs := net.Buffers{c.hdr[:], p}
		n, err := bufs.WriteTo(c.Conn)
		return max(0, int(n)-frameHeader), err
	}
	if len(p) > joinBody {
		if _, err := c.Conn.Write(c.hdr[:]); err != nil {
			return 0, err
		}
		return c.Conn.Write(p)
	}
	b := joinBufs.Get().(*[]byte)
	defer joinBufs.Put(b)
	*b = append(append((*b)[:0], c.hdr[:]...), p...)
	n, err := c.Conn.Write(*b)
	return max(0, n-frameHeader), err
}
