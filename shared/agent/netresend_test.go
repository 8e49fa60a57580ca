package agent_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/netstack"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/netpolicy"
)

// A rule change whose push over the node protocol is lost still reaches
// the node: the loop inside the environment gets through while the node
// has not heard of it, and is refused once the node's beat that writes its
// deadline reported the older version it applies and was answered with
// the new layer.
func TestNetworkRulesPushLost(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("network boundaries need the agent to run as root on Linux")
	}
	if err := agent.NamespacesWork(); err != nil {
		t.Skipf("this node cannot make namespaces: %v", err)
	}
	if err := netstack.Probe(); err != nil {
		t.Skip(err)
	}
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("needs curl")
	}
	outside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "outside") }))
	t.Cleanup(outside.Close)
	port := outside.Listener.Addr().(*net.TCPAddr).Port
	addr := netip.MustParseAddr("198.18.0.10")
	dial := func(ctx context.Context, network, a string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, outside.Listener.Addr().String())
	}
	loop := `while :; do if curl -sS -m 5 "http://allowed.test:` + strconv.Itoa(port) + `/" >/dev/null 2>&1; then echo ok >> results; else echo fail >> results; fi; sleep 0.1; done`
	const every = time.Second
	ss := newSocketStackEvery(t, every, domain.Template{Name: "ruled", Network: domain.NetworkRules, Runtime: "process",
		NetworkRules: &netpolicy.Rules{Allow: []string{"allowed.test"}}, Command: []string{"sh", "-c", loop}})
	s := ss.stack
	s.Clock.Set(time.Now())
	dir := t.TempDir()
	a := s.runAgentReturning(t, dir, time.Second, agent.BoundaryOutside(names{"allowed.test": addr}, dial, netip.AddrPortFrom(addr, uint16(port))))
	waitFor(t, "the node protocol connection", func() bool { return a.Transport() == agent.TransportWebSocket })
	id := s.lease(t, "ruled")
	s.wait(t, id, domain.StateReady)
	results := func() []string {
		b, _ := os.ReadFile(filepath.Join(dir, "envs", id, "results"))
		return strings.Fields(string(b))
	}
	waitFor(t, "the loop to get through", func() bool { r := results(); return len(r) > 0 && r[len(r)-1] == "ok" })
	// The first beat after the start names the new environment as changed,
	// and its answer carries the environment's layer whatever the versions
	// say: the push is dropped only once that beat has gone (beats go every
	// second while something changed).
	time.Sleep(3 * every)

	ss.dropNetwork.Store(true)
	if r := s.Do("PATCH", "/v1/environments/"+id+"/network", apitest.BobToken, map[string]any{"deny": []string{"allowed.test"}}); r.Status != 200 {
		t.Fatalf("PATCH network: %d %s", r.Status, r.Body)
	}
	// The push was lost: the loop still gets through.
	n := len(results())
	waitFor(t, "five more tries", func() bool { return len(results()) >= n+5 })
	if r := results(); r[len(r)-1] != "ok" {
		t.Fatalf("refused before any beat carried the change: %v", r[n:])
	}
	// The service's clock reaches the node's deadline: its next beat writes
	// it, reports the version it applies, and is answered with the layer.
	s.Clock.Advance(2 * every)
	before := len(results())
	waitFor(t, "the loop to be refused", func() bool { r := results(); return len(r) > before && r[len(r)-1] == "fail" })
}
