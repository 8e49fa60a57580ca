package agent_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/domain"
)

// The template's port is free when the agent chooses it, and another process
// binds it before the command does (two stacks on one machine, say): the
// command fails to bind and exits, and the agent starts it once more on a
// port of the node's choosing instead of failing the lease. (In a network
// namespace of its own, as root by default, no one else can take its port:
// this is the path of a node without namespaces.)
func TestLostPortRaceStartsAgainOnAnotherPort(t *testing.T) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	want := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	// The command says which port it was given; on the template's port it
	// waits for the test's go-ahead, then binds it (and fails if it is taken).
	// On any other port (the second start) it binds at once.
	script := `echo "$PORT" >> given; if [ "$PORT" = ` + strconv.Itoa(want) + ` ]; then while [ ! -e go ]; do sleep 0.02; done; fi; exec python3 -c '
import os, socket, time
s = socket.socket(); s.bind(("", int(os.environ["PORT"]))); s.listen(8)
time.sleep(3600)'`
	s := newStack(t, domain.Template{Name: "racer", Command: []string{"sh", "-c", script},
		Exports: map[string]domain.Export{"web": {Port: want}}})
	dir := s.runAgentWith(t, t.TempDir(), time.Second, agent.WithoutNamespaces)
	id := s.lease(t, "racer")
	root := filepath.Join(dir, "envs", id)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(filepath.Join(root, "given")); strings.TrimSpace(string(b)) == strconv.Itoa(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never started on the template's port")
		}
	}
	// Someone else takes the port now, between the agent's choice and the bind.
	held, err := net.Listen("tcp", ":"+strconv.Itoa(want))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := os.WriteFile(filepath.Join(root, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e := s.wait(t, id, domain.StateReady)
	if len(e.Exports) != 1 || e.Exports[0].Target == "127.0.0.1:"+strconv.Itoa(want) {
		t.Fatalf("ready on %+v, want another port than the taken %d", e.Exports, want)
	}
}
