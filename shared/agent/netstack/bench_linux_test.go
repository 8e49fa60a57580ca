//go:build linux

package netstack

import (
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/netpolicy"
)

// streamBytes is what one stream of the throughput benchmarks carries.
const streamBytes = 256 << 20

// sink listens on the node's loopback and reads every connection to its end.
func sink(b *testing.B) int {
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
				_, _ = io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stream sends streamBytes on c and reports throughput and the process's
// CPU per GB (sender, receiver and, through the boundary, the stack).
func stream(b *testing.B, dial func() (net.Conn, error)) {
	buf := make([]byte, 256<<10)
	b.SetBytes(streamBytes)
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		c, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		for sent := 0; sent < streamBytes; sent += len(buf) {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		c.Close()
	}
	b.StopTimer()
	gb := float64(b.N) * streamBytes / 1e9
	b.ReportMetric((cpuTime()-cpu0).Seconds()/gb, "cpu-s/GB")
}

func benchEnv(b *testing.B) *env {
	if err := Probe(); err != nil {
		b.Skip(err)
	}
	p := netpolicy.Layers{netpolicy.MustCompile(netpolicy.ModeRules, netpolicy.Rules{Allow: []string{"198.18.0.0/24"}})}
	return newEnv(b, p, fakeResolver{})
}

// BenchmarkStreamLoopback is one TCP stream over the node's loopback: what
// the boundary is measured against.
func BenchmarkStreamLoopback(b *testing.B) {
	port := sink(b)
	stream(b, func() (net.Conn, error) { return net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)) })
}

// BenchmarkStreamBoundary is one TCP stream from inside an environment's
// namespace through its boundary to the same server.
func BenchmarkStreamBoundary(b *testing.B) {
	port := sink(b)
	e := benchEnv(b)
	stream(b, func() (net.Conn, error) { return e.dialIn(b, "tcp", "198.18.0.10:"+strconv.Itoa(port)) })
}

// BenchmarkConnectLoopback is connection setup (connect, one byte, close)
// over the loopback.
func BenchmarkConnectLoopback(b *testing.B) {
	port := sink(b)
	connect(b, func() (net.Conn, error) { return net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)) })
}

// BenchmarkConnectBoundary is connection setup through the boundary: the
// decision, the node's own dial and the stack's handshake.
func BenchmarkConnectBoundary(b *testing.B) {
	port := sink(b)
	e := benchEnv(b)
	connect(b, func() (net.Conn, error) { return e.dialIn(b, "tcp", "198.18.0.10:"+strconv.Itoa(port)) })
}

func connect(b *testing.B, dial func() (net.Conn, error)) {
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
