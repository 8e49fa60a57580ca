package tunnel_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// benchBytes is what one figure moves: enough that a run is not a
// scheduler's accident on a busy machine.
const benchBytes = 256 << 20

// BenchmarkTunnel measures throughput on loopback to a target that reads
// everything and then says how much it read, with one stream and with
// eight at once. Each operation moves 256 MiB directly to the target and
// then 256 MiB through an agent's tunnel endpoint (WebSocket, yamux, the
// agent's dial and pipe), split over the streams, so both figures come
// from the same moments of the machine; it reports both rates and their
// ratio, tunnel/direct, which is the figure docs/performance.md gives.
//
//	go test -run '^$' -bench Tunnel -benchtime 3x -count 3 ./shared/tunnel/
func BenchmarkTunnel(b *testing.B) {
	sink := newSink(b)
	n := newNode(b, nil)
	n.run("env_1", sink)
	s := dial(b, n, n.ticket("env_1", []string{sink}, nil))
	direct := func() (net.Conn, error) { return net.Dial("tcp", sink) }
	tunnelled := func() (net.Conn, error) { return s.Open(context.Background(), sink) }
	for _, streams := range []int{1, 8} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			var dt, tt time.Duration
			b.SetBytes(2 * benchBytes)
			for b.Loop() {
				dt += push(b, direct, streams)
				tt += push(b, tunnelled, streams)
			}
			mb := float64(b.N) * benchBytes / 1e6
			b.ReportMetric(mb/dt.Seconds(), "direct-MB/s")
			b.ReportMetric(mb/tt.Seconds(), "tunnel-MB/s")
			b.ReportMetric(dt.Seconds()/tt.Seconds(), "tunnel/direct")
		})
	}
}

// push opens streams connections with open, writes benchBytes over them
// together (1 MiB writes), ends their writing halves, waits for the sink to
// report that it read them all, and returns how long that took.
func push(b *testing.B, open func() (net.Conn, error), streams int) time.Duration {
	per := benchBytes / streams
	conns := make([]net.Conn, streams)
	for i := range conns {
		c, err := open()
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	chunk := make([]byte, 1<<20)
	errs := make(chan error, streams)
	var wg sync.WaitGroup
	start := time.Now()
	for _, c := range conns {
		wg.Go(func() {
			for sent := 0; sent < per; {
				k := min(len(chunk), per-sent)
				if _, err := c.Write(chunk[:k]); err != nil {
					errs <- err
					return
				}
				sent += k
			}
			if err := closeWrite(c); err != nil {
				errs <- err
				return
			}
			var got [8]byte
			if _, err := io.ReadFull(c, got[:]); err != nil {
				errs <- err
				return
			}
			if n := binary.BigEndian.Uint64(got[:]); n != uint64(per) {
				errs <- fmt.Errorf("the target read %d bytes, want %d", n, per)
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return d
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

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
