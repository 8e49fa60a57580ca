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
// scheduler's accident on a busy machine. It goes in rounds, direct and
// tunnel taking turns, so that both meet the same load.
const (
	benchBytes = 256 << 20
	rounds     = 4
)

// BenchmarkTunnel measures throughput on loopback to a target that reads
// what it is sent and says how much it read, with one stream and with
// eight at once. Each operation moves 256 MiB directly to the target and
// 256 MiB through an agent's tunnel endpoint (the upgraded connection,
// yamux, the agent's dial and pipe), split over the streams, in turns, so
// both figures come from the same moments of the machine; it reports both
// rates and their ratio, tunnel/direct, which is the figure
// docs/performance.md gives. The connections are opened before the clock
// starts: this is a connection's throughput, not its setup.
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
			dc, tc := open(b, direct, streams), open(b, tunnelled, streams)
			var dt, tt time.Duration
			b.SetBytes(2 * benchBytes)
			for b.Loop() {
				for range rounds {
					dt += push(b, dc)
					tt += push(b, tc)
				}
			}
			mb := float64(b.N) * benchBytes / 1e6
			b.ReportMetric(mb/dt.Seconds(), "direct-MB/s")
			b.ReportMetric(mb/tt.Seconds(), "tunnel-MB/s")
			b.ReportMetric(dt.Seconds()/tt.Seconds(), "tunnel/direct")
		})
	}
}

func open(b *testing.B, open func() (net.Conn, error), streams int) []net.Conn {
	conns := make([]net.Conn, streams)
	for i := range conns {
		c, err := open()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	return conns
}

// push writes a round's share of benchBytes over conns together (1 MiB
// writes), waits for the sink to report that it read them all, and returns
// how long that took.
func push(b *testing.B, conns []net.Conn) time.Duration {
	per := benchBytes / rounds / len(conns)
	chunk := make([]byte, 1<<20)
	errs := make(chan error, len(conns))
	var wg sync.WaitGroup
	start := time.Now()
	for _, c := range conns {
		wg.Go(func() {
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(per))
			if _, err := c.Write(n[:]); err != nil {
				errs <- err
				return
			}
			for sent := 0; sent < per; {
				k := min(len(chunk), per-sent)
				if _, err := c.Write(chunk[:k]); err != nil {
					errs <- err
					return
				}
				sent += k
			}
			if _, err := io.ReadFull(c, n[:]); err != nil {
				errs <- err
				return
			}
			if got := binary.BigEndian.Uint64(n[:]); got != uint64(per) {
				errs <- fmt.Errorf("the target read %d bytes, want %d", got, per)
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

// newSink is a target that reads, again and again, a length and as many
// bytes, and answers each with the number of bytes it read.
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
				var n [8]byte
				for {
					if _, err := io.ReadFull(c, n[:]); err != nil {
						return
					}
					got, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint64(n[:])))
					if err != nil {
						return
					}
					binary.BigEndian.PutUint64(n[:], uint64(got))
					if _, err := c.Write(n[:]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}
