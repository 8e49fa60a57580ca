package tunnel_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// BenchmarkTunnel measures one TCP stream's throughput on loopback, to a
// target that reads everything and then says how much it read: "direct"
// connects to the target, "tunnel" goes through an agent's tunnel endpoint
// (WebSocket, yamux, the agent's dial and pipe). Each operation is 1 MiB;
// go test reports MB/s, and docs/performance.md compares the two.
//
//	go test -run '^$' -bench Tunnel ./shared/tunnel/
func BenchmarkTunnel(b *testing.B) {
	sink := newSink(b)
	b.Run("direct", func(b *testing.B) {
		c, err := net.Dial("tcp", sink)
		if err != nil {
			b.Fatal(err)
		}
		push(b, c)
	})
	b.Run("tunnel", func(b *testing.B) {
		n := newNode(b, nil)
		n.run("env_1", sink)
		s := dial(b, n, n.ticket("env_1", []string{sink}, nil))
		c, err := s.Open(context.Background(), sink)
		if err != nil {
			b.Fatal(err)
		}
		push(b, c)
	})
}

// push writes b.N MiB on c, ends its writing half, and waits for the sink
// to report that it read them all.
func push(b *testing.B, c net.Conn) {
	defer c.Close()
	chunk := make([]byte, 1<<20)
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		b.Fatal(err)
	}
	var got [8]byte
	if _, err := io.ReadFull(c, got[:]); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if n := binary.BigEndian.Uint64(got[:]); n != uint64(b.N)*uint64(len(chunk)) {
		b.Fatalf("the target read %d bytes, want %d", n, b.N*len(chunk))
	}
}

// newSink is a target that reads a connection to its end and answers with
// the number of bytes it read.
func newSink(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, err := io.Copy(io.Discard, c)
				if err != nil {
					return
				}
				var out [8]byte
				binary.BigEndian.PutUint64(out[:], uint64(n))
				_, _ = c.Write(out[:])
			}()
		}
	}()
	return ln.Addr().String()
}
