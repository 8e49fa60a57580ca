package agent_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// egressProbe serves its folder on its export's port, then tries each of
// $TARGETS (name=host:port) three ways: a plain http:// GET through the
// proxy $HTTP_PROXY names (127.0.0.1:3128 when none), a GET through a
// CONNECT stream of that proxy, and a direct connection; and writes what
// happened, with the proxy variables it was given, to results.
const egressProbe = `basename "$ENVLEASE_ROOT" > who
python3 -m http.server "$PORT" --bind 127.0.0.1 >/dev/null 2>&1 &
exec python3 -c '
import http.client, json, os, socket, time
names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "NO_PROXY", "no_proxy")
res = {"env": {k: os.environ.get(k, "") for k in names}}
ph, pp = os.environ.get("HTTP_PROXY", "http://127.0.0.1:3128")[len("http://"):].rsplit(":", 1)
def answer(c):
    r = c.getresponse()
    return "%d %s" % (r.status, r.read().decode(errors="replace"))
def get(addr):
    try:
        c = http.client.HTTPConnection(ph, int(pp), timeout=30)
        c.request("GET", "http://%s/hello" % addr)
        return answer(c)
    except OSError as e:
        return "failed: " + str(e)
def connect(addr):
    host, port = addr.rsplit(":", 1)
    try:
        c = http.client.HTTPConnection(ph, int(pp), timeout=30)
        c.set_tunnel(host, int(port))
        c.request("GET", "/hello")
        return answer(c)
    except OSError as e:
        return "failed: " + str(e)
def direct(addr):
    host, port = addr.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        return "connected"
    except OSError as e:
        return "failed: " + str(e)
for kv in os.environ["TARGETS"].split():
    name, addr = kv.split("=", 1)
    res["get " + name] = get(addr)
    res["connect " + name] = connect(addr)
    res["direct " + name] = direct(addr)
json.dump(res, open("results.tmp", "w"))
os.rename("results.tmp", "results")
time.sleep(3600)'`

// From inside real environments (as root: in namespaces of their own), an
// egress environment reaches an "outside" server through its proxy, by
// http:// and CONNECT, and is refused (403, with the reason) the node's
// loopback, its other address, the metadata address and a private
// address; it has no direct route anywhere; its export is still reached
// through the tunnel; its proxy closes with it and logs its totals. An
// environment of network none has no proxy, no proxy variables and no
// network.
func TestEgressEnvironmentReachesOnlyPublicAddresses(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("environments run in namespaces of their own only when the agent runs as root on Linux")
	}
	if err := agent.NamespacesWork(); err != nil {
		t.Skipf("this node cannot make namespaces: %v", err)
	}
	// The "outside": on the node's loopback, which only this test's agent
	// lets its proxies reach, at this one port.
	outside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "outside %s", r.URL.Path)
	}))
	t.Cleanup(outside.Close)
	// What no environment may reach, listening on every address of the node.
	var reached atomic.Int64
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	inside := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	inside.Listener = ln
	inside.Start()
	t.Cleanup(inside.Close)
	insidePort := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)

	targets := map[string]string{
		"outside":  outside.Listener.Addr().String(),
		"loopback": "127.0.0.1:" + insidePort,
		"metadata": "169.254.169.254:80",
		"private":  "10.0.0.1:80",
	}
	if ip := nodeAddress(); ip != "" {
		targets["node-address"] = net.JoinHostPort(ip, insidePort)
	}
	var list []string
	for k, v := range targets {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	env := map[string]string{"TARGETS": strings.Join(list, " ")}
	s := newStack(t,
		domain.Template{Name: "egress", Network: domain.NetworkEgress, Command: []string{"sh", "-c", egressProbe}, Env: env,
			Exports: map[string]domain.Export{"web": {Port: 8080}}},
		domain.Template{Name: "closed", Command: []string{"sh", "-c", egressProbe}, Env: env,
			Exports: map[string]domain.Export{"web": {Port: 8080}}},
	)
	s.Clock.Set(time.Now()) // the agent judges tickets by the real clock
	logs := &lockedBuffer{}
	dir := s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) {
		c.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		agent.AllowEgressTo(netip.MustParseAddrPort(outside.Listener.Addr().String()))(c)
	})

	open, closed := s.lease(t, "egress"), s.lease(t, "closed")
	s.wait(t, open, domain.StateReady)
	s.wait(t, closed, domain.StateReady)
	got := map[string]map[string]any{open: probeResults(t, dir, open), closed: probeResults(t, dir, closed)}
	t.Logf("from inside the egress environment: %v", got[open])
	t.Logf("from inside the closed environment: %v", got[closed])

	proxy := "http://127.0.0.1:3128"
	wantEnv := map[string]string{"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy,
		"ALL_PROXY": proxy, "NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1"}
	for k, v := range got[open]["env"].(map[string]any) {
		if v != wantEnv[k] {
			t.Errorf("egress environment: %s=%q, want %q", k, v, wantEnv[k])
		}
	}
	for k, v := range got[closed]["env"].(map[string]any) {
		if v != "" {
			t.Errorf("closed environment: %s=%q, want none", k, v)
		}
	}

	expect := func(env, key, prefix string) {
		t.Helper()
		if v, _ := got[env][key].(string); !strings.HasPrefix(v, prefix) {
			t.Errorf("%s from inside the %s environment: %q, want %q...", key, map[string]string{open: "egress", closed: "closed"}[env], v, prefix)
		}
	}
	expect(open, "get outside", "200 outside /hello")
	expect(open, "connect outside", "200 outside /hello")
	for name := range targets {
		expect(open, "direct "+name, "failed")
		expect(closed, "direct "+name, "failed")
		expect(closed, "get "+name, "failed")
		expect(closed, "connect "+name, "failed")
		if name == "outside" {
			continue
		}
		expect(open, "get "+name, "403 egress to ")
		expect(open, "connect "+name, "failed: Tunnel connection failed: 403")
	}
	for name, class := range map[string]string{"loopback": "loopback", "metadata": "link-local", "private": "private"} {
		if v, _ := got[open]["get "+name].(string); !strings.Contains(v, "is "+class) {
			t.Errorf("get %s from inside the egress environment: %q, want the reason (%s)", name, v, class)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("%d request(s) from the environments reached the node's server", n)
	}

	// The egress environment's export is still reached through the tunnel.
	if got := s.getThroughTunnel(t, open, "127.0.0.1:8080", "/who"); strings.TrimSpace(got) != open {
		t.Errorf("GET /who through the tunnel: %q, want %q", got, open)
	}

	// Its proxy ends with it and says what went through: the two requests
	// to the outside; the closed environment had none.
	for _, id := range []string{open, closed} {
		if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
			t.Fatalf("delete: %d", r.Status)
		}
		s.wait(t, id, domain.StateStopped)
	}
	var totals []map[string]any
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if totals = logs.records("INFO", "egress totals"); len(totals) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(totals) != 1 || totals[0]["connections"] != 2.0 || totals[0]["refused"].(float64) < 2 || totals[0]["bytesReceived"].(float64) <= 0 {
		t.Errorf("egress totals logged: %v, want one record with 2 connections, refusals and bytes", totals)
	}
}

// probeResults waits for the results egressProbe writes in an
// environment's folder.
func probeResults(t *testing.T, dir, id string) map[string]any {
	t.Helper()
	root := filepath.Join(dir, "envs", id)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(root, "results")); err == nil {
			var res map[string]any
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatalf("results: %v\n%s", err, b)
			}
			return res
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(root, ".envlease.log"))
			t.Fatalf("the probe of %s wrote no results; its log:\n%s", id, log)
		}
	}
}

// Where environments share the node's network (the agent is not root, or
// the node cannot make namespaces), network egress cannot be enforced: the
// agent says so once at start, and an egress environment is told of no
// proxy.
func TestEgressNotEnforcedWithoutNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name string
		tune func(*agent.Config)
	}{{"not root", agent.AsNotRoot}, {"no namespaces", agent.WithoutNamespaces}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, domain.Template{Name: "egress", Network: domain.NetworkEgress,
				Command: []string{"sh", "-c", "env > env.tmp && mv env.tmp env.txt && exec sleep 3600"}})
			logs := &lockedBuffer{}
			dir := s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) {
				c.Log = slog.New(slog.NewJSONHandler(logs, nil))
				tc.tune(c)
			})
			id := s.lease(t, "egress")
			s.wait(t, id, domain.StateReady)
			var env []byte
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
				var err error
				if env, err = os.ReadFile(filepath.Join(dir, "envs", id, "env.txt")); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the environment wrote no env.txt: %v", err)
				}
			}
			if strings.Contains(strings.ToLower(string(env)), "proxy=") {
				t.Errorf("an environment on the node's network is told of a proxy:\n%s", env)
			}
			if w := logs.records("WARN", ""); !strings.Contains(fmt.Sprint(w), "whatever its template's network says") {
				t.Errorf("no warning that network is not enforced: %v", w)
			}
			if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
				t.Fatalf("delete: %d", r.Status)
			}
			s.wait(t, id, domain.StateStopped)
		})
	}
}
