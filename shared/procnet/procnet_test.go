package procnet

import (
	"net"
	"os"
	"runtime"
	"testing"
)

// A listener of this process is found by its port and held by this process;
// a port nobody listens on has no socket, and another process holds none.
func TestListeningAndHolds(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	for _, network := range []string{"tcp4", "tcp6"} {
		ln, err := net.Listen(network, "localhost:0")
		if err != nil {
			t.Logf("%s: %v", network, err)
			continue
		}
		port := ln.Addr().(*net.TCPAddr).Port
		inodes, known := Listening(port)
		if !known || len(inodes) != 1 {
			t.Fatalf("%s port %d: inodes %v known %v, want one", network, port, inodes, known)
		}
		if !Holds(os.Getpid(), inodes) {
			t.Errorf("%s: this process does not hold its own listener", network)
		}
		if Holds(1, inodes) {
			t.Errorf("%s: process 1 holds this test's listener", network)
		}
		ln.Close()
		if inodes, _ := Listening(port); len(inodes) != 0 {
			t.Errorf("%s: a closed listener is still listed: %v", network, inodes)
		}
	}
}
