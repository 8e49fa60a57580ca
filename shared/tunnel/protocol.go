// Package tunnel carries TCP connections from a client machine to an
// environment's export targets through the node agent that runs it.
//
// The wire: the client opens a WebSocket to the agent's tunnel URL with a
// ticket (package ticket) as its bearer token, and runs one yamux session
// over it, the client's side being the yamux client. Each forwarded
// connection is one stream: the client writes one JSON line
// {"target": "host:port"}, the agent answers one line {"ok": true} or
// {"error": "..."} (then closes the stream), and after ok the stream carries
// the connection's bytes both ways, each side's end of writing passed on
// as a half-close.
//
// This file is that protocol, shared by the agent (shared/agent) and the
// client side here (Dial, Forward).
package tunnel

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// Path is where an agent serves tunnels.
const Path = "/tunnel"

// MaxLine bounds a request or reply line, newline included.
const MaxLine = 1024

// HeaderTimeout bounds how long a new stream may take to name its target,
// and the client's wait for the answer (which includes the agent's dial).
const HeaderTimeout = 15 * time.Second

// Request is the first line of a stream, from the client.
type Request struct {
	Target string `json:"target"`
}

// Reply is the agent's answer to a Request.
type Reply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// WriteLine writes v as one JSON line.
func WriteLine(w io.Writer, v any) error { return WriteLineMax(w, v, MaxLine) }

// ReadLine reads one JSON line of at most MaxLine bytes into v. r must be
// the reader the stream's bytes are read through afterwards: it may hold
// some of them already.
func ReadLine(r *bufio.Reader, v any) error { return ReadLineMax(r, v, MaxLine) }

// WriteLineMax writes v as one JSON line of at most max bytes, for a
// protocol over the same session whose lines are longer (package
// execsession).
func WriteLineMax(w io.Writer, v any, max int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b)+1 > max {
		return fmt.Errorf("line of %d bytes, at most %d", len(b)+1, max)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadLineMax is ReadLine with lines of at most max bytes.
func ReadLineMax(r *bufio.Reader, v any, max int) error {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return errors.New("line too long")
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) && len(line) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("malformed line: %w", err)
	}
	return nil
}

// MuxConfig is the yamux configuration of both ends.
func MuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	// A dead node (or client) is noticed within about a keepalive or a
	// stalled write, and the client redials.
	c.KeepAliveInterval = 15 * time.Second
	c.ConnectionWriteTimeout = 15 * time.Second
	// A larger window than yamux's 256 KiB keeps one stream fast over a
	// link with some latency; the agent bounds the streams per tunnel.
	c.MaxStreamWindowSize = 1 << 20
	// Left to the pipes: a stream half-closed by one side may carry the
	// other side's bytes for as long as it takes (a long download after
	// the request's end), which yamux's timeout would cut with a reset.
	c.StreamCloseTimeout = 0
	c.StreamOpenTimeout = 30 * time.Second
	c.LogOutput = io.Discard
	return c
}

// bufConn is a connection whose reads go through the reader a header was
// read with, so the bytes it buffered are not lost.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// maxFrame bounds the body of a yamux data frame a stream sends. yamux
// sends as much of a write as the window allows in one frame, and the
// receiving end holds the stream's buffer while it reads a frame's body
// off the connection, so its reader waits for the whole frame: a megabyte
// frame stalls the pipe behind it for as long as it takes to arrive.
// Frames of this size keep both ends busy at once, with the window (which
// is what keeps a stream fast over a link with latency) as large as ever.
const maxFrame = 256 << 10

// Write sends b in frames of at most maxFrame bytes.
func (c *bufConn) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k, err := c.Conn.Write(b[:min(len(b), maxFrame)])
		n += k
		if err != nil {
			return n, err
		}
		b = b[k:]
	}
	return n, nil
}

// CloseWrite ends the writing half of the connection underneath.
func (c *bufConn) CloseWrite() error { return closeWrite(c.Conn) }

// NewBufConn returns c reading through r (which reads from c).
func NewBufConn(c net.Conn, r *bufio.Reader) net.Conn { return &bufConn{Conn: c, r: r} }

// closeWrite ends what a connection writes, leaving what it reads open: a
// TCP half-close, or a yamux stream's FIN (its Close, which still reads
// until the other side's FIN).
func closeWrite(c net.Conn) error {
	switch x := c.(type) {
	case interface{ CloseWrite() error }:
		return x.CloseWrite()
	case *yamux.Stream:
		return x.Close()
	}
	return c.Close()
}

// Pipe copies a to b and b to a until both directions end, then closes
// both. The end of one direction (EOF) is passed on as a half-close, so a
// request-then-response protocol that shuts its writing half still gets its
// answer; an error in either direction closes both at once.
func Pipe(a, b net.Conn) {
	var once sync.Once
	abort := func() {
		once.Do(func() {
			a.Close()
			b.Close()
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		if _, err := copyConn(dst, src); err != nil {
			abort()
			return
		}
		if err := closeWrite(dst); err != nil {
			abort()
		}
	}
	go half(a, b)
	go half(b, a)
	wg.Wait()
	abort()
}

// A pipe copies through a buffer of io.Copy's 32 KiB while its connection
// trickles, and through one of pipeBuffer while a read fills the small one
// (a bulk transfer): a fast stream then costs fewer system calls per byte,
// and an idle connection holds no more memory than it did.
const (
	pipeSmall  = 32 << 10
	pipeBuffer = 256 << 10
)

var pipeBufs = sync.Pool{New: func() any { b := make([]byte, pipeBuffer); return &b }}

// copyConn copies src to dst until src ends (nil) or an error.
func copyConn(dst io.Writer, src io.Reader) (int64, error) {
	small := make([]byte, pipeSmall)
	buf := small
	var big *[]byte
	defer func() {
		if big != nil {
			pipeBufs.Put(big)
		}
	}()
	var n int64
	for {
		nr, rerr := src.Read(buf)
		if nr > 0 {
			nw, werr := dst.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			if nw != nr {
				return n, io.ErrShortWrite
			}
			switch {
			case big == nil && nr == len(buf):
				big = pipeBufs.Get().(*[]byte)
				buf = *big
			case big != nil && nr < pipeSmall:
				pipeBufs.Put(big)
				big, buf = nil, small
			}
		}
		if errors.Is(rerr, io.EOF) {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}
