package agent_test

import (
	"math/rand/v2"
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
	want := quietPort(t)
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
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(root, "given"))
		if given := strings.TrimSpace(string(b)); given == strconv.Itoa(want) {
			break
		} else if given != "" {
			t.Fatalf("the command was given port %s, not the template's %d (something else held it when the agent chose)", given, want)
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

// quietPort is a free port below the kernel's ephemeral range, so that no
// outgoing connection of this or another test (which the kernel gives an
// ephemeral port) can take it between the test's choice and the agent's:
// a port from listening on ":0" is in that range, and once a CI run found
// it taken by the time the agent looked.
func quietPort(t *testing.T) int {
	t.Helper()
	below := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				below = n
			}
		}
	}
	const lowest = 10000
	if below <= lowest+100 {
		t.Skipf("the ephemeral port range starts at %d: no quiet port below it", below)
	}
	start := lowest + rand.IntN(below-lowest)
	for i := 0; i < below-lowest; i++ {
		port := lowest + (start-lowest+i)%(below-lowest)
		if ln, err := net.Listen("tcp", ":"+strconv.Itoa(port)); err == nil {
			ln.Close()
			return port
		}
	}
	t.Fatalf("no free port between %d and %d", lowest, below)
	return 0
}
