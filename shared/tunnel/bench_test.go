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

	"github.com/envlease/envlease/shared/tunnel"
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
// starts: this is a connection's throughput, not its setup. "upgrade" is
// the tunnel as clients open it; "websocket" is the fallback.
//
//	go test -run '^$' -bench Tunnel -benchtime 3x -count 3 ./shared/tunnel/
func BenchmarkTunnel(b *testing.B) {
	sink := newSink(b)
	n := newNode(b, nil)
	n.run("env_1", sink)
	direct := func() (net.Conn, error) { return net.Dial("tcp", sink) }
	transports := []struct {
		name string
		dial tunnel.Dialer
	}{
		{"upgrade", nil},
		// What a client falls back to when only WebSockets reach the agent.
		{"websocket", tunnel.WebSocketDialer(nil)},
	}
	for _, tr := range transports {
		s, err := tunnel.Dial(context.Background(), tr.dial, n.url, n.ticket("env_1", []string{sink}, nil))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		tunnelled := func() (net.Conn, error) { return s.Open(context.Background(), sink) }
		for _, streams := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/streams=%d", tr.name, streams), func(b *testing.B) {
				dc, tc := open(b, direct, streams), open(b, tunnelled, streams)
				var direct, tunnel cost
				b.SetBytes(2 * benchBytes)
				for b.Loop() {
					for range rounds {
						direct.add(push(b, dc))
						tunnel.add(push(b, tc))
					}
				}
				mb := float64(b.N) * benchBytes / 1e6
				b.ReportMetric(mb/direct.wall.Seconds(), "direct-MB/s")
				b.ReportMetric(mb/tunnel.wall.Seconds(), "tunnel-MB/s")
				b.ReportMetric(direct.wall.Seconds()/tunnel.wall.Seconds(), "tunnel/direct")
				// CPU per byte does not depend on what else the machine
				// runs: what the tunnel's hops and copies cost, next to the
				// direct path.
				b.ReportMetric(float64(direct.cpu.Microseconds())/mb, "direct-cpu-µs/MB")
				b.ReportMetric(float64(tunnel.cpu.Microseconds())/mb, "tunnel-cpu-µs/MB")
			})
		}
	}
}

// cost is the time a path took to move its bytes, and the CPU time the
// process spent meanwhile.
type cost struct{ wall, cpu time.Duration }

func (c *cost) add(d cost) { c.wall += d.wall; c.cpu += d.cpu }

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
// what that cost.
func push(b *testing.B, conns []net.Conn) cost {
	per := benchBytes / rounds / len(conns)
	chunk := make([]byte, 1<<20)
	errs := make(chan error, len(conns))
	var wg sync.WaitGroup
	start, cpu := time.Now(), cpuTime()
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
	d := cost{wall: time.Since(start), cpu: cpuTime() - cpu}
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
