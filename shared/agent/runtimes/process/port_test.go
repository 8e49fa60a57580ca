package process

import (
	"net"
	"testing"
)

// An export's target is the node's address plus the template's port whenever
// the node has that port free; only a second environment of the template on
// the node, or a port something else holds, gets another one.
func TestPortPoolPrefersTheTemplatesPort(t *testing.T) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	free := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	var pp portPool
	first, err := pp.take(free)
	if err != nil || first != free {
		t.Fatalf("first take of free port %d: %d %v", free, first, err)
	}
	second, err := pp.take(free)
	if err != nil || second == free || second == 0 {
		t.Fatalf("second take: %d %v, want another port than %d", second, err, free)
	}
	pp.release(map[string]int{"web": first})
	if again, err := pp.take(free); err != nil || again != free {
		t.Fatalf("after release: %d %v", again, err)
	}

	held, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	busy := held.Addr().(*net.TCPAddr).Port
	if got, err := pp.take(busy); err != nil || got == busy {
		t.Fatalf("port held by another process: got %d %v", got, err)
	}
	if got, err := pp.take(0); err != nil || got == 0 {
		t.Fatalf("no preference: %d %v", got, err)
	}
}
