package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/nsinit"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/tunnel"
)

// hostileScript serves its folder on its export's port (its file who names
// it), waits for the test to write the addresses to try (targets), then runs
// the audit's probe: the listening ports /proc/net/tcp shows, a connection
// to each target, an unsigned PutItem to the DynamoDB stand-in and to every
// port it found, and the process list (ps and /proc).
const hostileScript = `basename "$ENVLEASE_ROOT" > who
ls -A /dev/shm > shm-seen; echo "$ENVLEASE_ROOT" > "/dev/shm/$(basename "$ENVLEASE_ROOT")"
python3 -m http.server "$PORT" --bind 127.0.0.1 >/dev/null 2>&1 &
while [ ! -e targets ]; do sleep 0.05; done
exec python3 -c '
import http.client, json, os, socket, subprocess
res = {}
ports = set()
for f in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        for line in open(f).read().splitlines()[1:]:
            p = line.split()
            if p[3] == "0A":
                ports.add(int(p[1].rsplit(":", 1)[1], 16))
    except OSError:
        pass
res["listening"] = sorted(ports)
targets = dict(l.split("=", 1) for l in open("targets").read().split())
for name, addr in sorted(targets.items()):
    host, port = addr.rsplit(":", 1)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
        res[name] = "connected"
    except OSError as e:
        res[name] = "failed: " + str(e)
def put(host, port):
    try:
        c = http.client.HTTPConnection(host, port, timeout=5)
        c.request("POST", "/", body=json.dumps({"TableName": "envlease", "Item": {"pk": {"S": "KEY#planted"}}}),
                  headers={"X-Amz-Target": "DynamoDB_20120810.PutItem", "Content-Type": "application/x-amz-json-1.0"})
        return "answered %d" % c.getresponse().status
    except OSError as e:
        return "failed: " + str(e)
host, port = targets["dynamo"].rsplit(":", 1)
res["putitem"] = put(host, int(port))
for p in sorted(ports):
    if p != int(os.environ["PORT"]):
        res["putitem-found-%d" % p] = put("127.0.0.1", p)
res["ps"] = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
res["proc"] = sorted(int(d) for d in os.listdir("/proc") if d.isdigit())
res["ns"] = {n: os.readlink("/proc/self/ns/" + n) for n in ("net", "pid", "mnt", "ipc")}
json.dump(res, open("results.tmp", "w"))
os.rename("results.tmp", "results")
import time
time.sleep(3600)'`

// From inside a real environment (as root: in namespaces of its own) the
// audit's script finds none of the node's listening ports in /proc/net/tcp,
// cannot reach the node's loopback (a DynamoDB stand-in, the API, the
// agent's tunnel endpoint) nor its other addresses, another environment's
// export or the metadata address, and sees only its own processes; its
// export, and that of a second environment of the same template on the same
// port, are still reached through the tunnel.
func TestEnvironmentReachesOnlyItself(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("environments run in namespaces of their own only when the agent runs as root on Linux")
	}
	if err := agent.NamespacesWork(); err != nil {
		t.Skipf("this node cannot make namespaces: %v", err)
	}
	// The DynamoDB stand-in listens on every address of the node.
	var puts atomic.Int64
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	dynamo := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		puts.Add(1)
		w.WriteHeader(200)
	}))
	dynamo.Listener = ln
	dynamo.Start()
	t.Cleanup(dynamo.Close)
	dynamoPort := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	s := newStack(t,
		domain.Template{Name: "victim", Command: []string{"sh", "-c", `echo victim > who; exec python3 -m http.server "$PORT"`},
			Exports: map[string]domain.Export{"web": {Port: 9090}}},
		domain.Template{Name: "hostile", Command: []string{"sh", "-c", hostileScript},
			Exports: map[string]domain.Export{"web": {Port: 8080}}},
	)
	s.Clock.Set(time.Now()) // the agent judges tickets by the real clock
	dir := s.runAgent(t, time.Second)

	// Something of the node's in its /dev/shm, which no environment sees.
	shmMarker := filepath.Join("/dev/shm", "envlease-test-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.WriteFile(shmMarker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(shmMarker) })

	victim := s.lease(t, "victim")
	s.wait(t, victim, domain.StateReady)
	victimTicket := s.tunnelTicket(t, victim)
	tunnelURL, err := url.Parse(victimTicket.URL)
	if err != nil {
		t.Fatal(err)
	}
	apiURL, _ := url.Parse(s.url)

	first, second := s.lease(t, "hostile"), s.lease(t, "hostile")
	e1, e2 := s.wait(t, first, domain.StateReady), s.wait(t, second, domain.StateReady)
	if e1.Exports[0].Target != "127.0.0.1:8080" || e2.Exports[0].Target != "127.0.0.1:8080" {
		t.Fatalf("two environments of one template: targets %+v and %+v, want the template's port as is", e1.Exports, e2.Exports)
	}

	targets := map[string]string{
		"dynamo":   "127.0.0.1:" + dynamoPort,
		"api":      apiURL.Host,
		"tunnel":   tunnelURL.Host,
		"victim":   "127.0.0.1:9090",
		"metadata": "169.254.169.254:80",
	}
	if ip := nodeAddress(); ip != "" {
		targets["dynamo-node-address"] = net.JoinHostPort(ip, dynamoPort)
	}
	var lines []string
	for k, v := range targets {
		lines = append(lines, k+"="+v)
	}
	root := filepath.Join(dir, "envs", first)
	if err := os.WriteFile(filepath.Join(root, "targets"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(root, "results")); err == nil {
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatalf("results: %v\n%s", err, b)
			}
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(root, ".envlease.log"))
			t.Fatalf("the probe wrote no results; its log:\n%s", log)
		}
	}
	t.Logf("from inside the environment: %v", res)

	for name := range targets {
		if got, _ := res[name].(string); !strings.HasPrefix(got, "failed") {
			t.Errorf("connect to %s (%s) from inside the environment: %q, want it to fail", name, targets[name], got)
		}
	}
	if got, _ := res["putitem"].(string); !strings.HasPrefix(got, "failed") || puts.Load() != 0 {
		t.Errorf("PutItem to the DynamoDB stand-in: %q, %d request(s) arrived", got, puts.Load())
	}
	for _, p := range res["listening"].([]any) {
		port := strconv.Itoa(int(p.(float64)))
		if port != "8080" {
			t.Errorf("/proc/net/tcp inside the environment lists port %s, not its own", port)
		}
		for name, addr := range targets {
			if strings.HasSuffix(addr, ":"+port) {
				t.Errorf("/proc/net/tcp inside the environment lists the %s's port %s", name, port)
			}
		}
	}
	for k, v := range res {
		if strings.HasPrefix(k, "putitem-found-") && !strings.HasPrefix(v.(string), "failed") {
			t.Errorf("%s: %q", k, v)
		}
	}
	ps, _ := res["ps"].(string)
	for _, foreign := range []string{filepath.Base(os.Args[0]), "http.server\n", "victim", "9090"} {
		if strings.Contains(ps, foreign) {
			t.Errorf("ps inside the environment shows a process not its own (%q):\n%s", foreign, ps)
		}
	}
	if !strings.Contains(ps, "http.server 8080") || !strings.Contains(ps, "1 envlease-nsinit") {
		t.Errorf("ps inside the environment does not show its own processes:\n%s", ps)
	}
	// Its init, the shell's python (the probe), the web server, and ps.
	if procs := res["proc"].([]any); len(procs) > 6 {
		t.Errorf("/proc inside the environment lists %d processes: %v", len(procs), procs)
	}

	for n, ns := range res["ns"].(map[string]any) {
		if own, _ := os.Readlink("/proc/self/ns/" + n); own == ns {
			t.Errorf("the environment shares the node's %s namespace %s", n, own)
		}
	}

	// /dev/shm is its own: it saw none of the node's, and the node sees
	// nothing of what it wrote there.
	if seen, _ := os.ReadFile(filepath.Join(root, "shm-seen")); strings.TrimSpace(string(seen)) != "" {
		t.Errorf("the environment saw the node's /dev/shm (where %s is): %q", shmMarker, seen)
	}
	if _, err := os.Stat(filepath.Join("/dev/shm", first)); !os.IsNotExist(err) {
		t.Errorf("what the environment wrote in /dev/shm is on the node's: %v", err)
	}

	// The exports are reached through the tunnel: each environment's own on
	// the same port, and the victim's.
	for id, want := range map[string]string{first: first, second: second, victim: "victim"} {
		target := "127.0.0.1:8080"
		if id == victim {
			target = "127.0.0.1:9090"
		}
		if got := s.getThroughTunnel(t, id, target, "/who"); strings.TrimSpace(got) != want {
			t.Errorf("GET /who of %s through the tunnel: %q, want %q", id, got, want)
		}
	}

	// Teardown leaves no namespace: every environment's init is gone, and
	// no process of the node is in a network namespace the agent made.
	ns := envNetNamespaces(t, dir)
	if len(ns) != 3 {
		t.Errorf("network namespaces of the three environments: %v", ns)
	}
	for _, id := range []string{first, second, victim} {
		if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
			t.Fatalf("delete: %d", r.Status)
		}
		s.wait(t, id, domain.StateStopped)
	}
	for deadline := time.Now().Add(time.Minute); len(envNetNamespaces(t, dir)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("namespaces left after every environment stopped: %v", envNetNamespaces(t, dir))
		}
	}
}

// envNetNamespaces lists the network namespaces the inits of environments
// under dir hold (an init is argv[0] envlease-nsinit with ENVLEASE_ROOT
// its folder), keyed by namespace, with a pid.
func envNetNamespaces(t *testing.T, dir string) map[string]int {
	t.Helper()
	own, _ := os.Readlink("/proc/self/ns/net")
	out := map[string]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		environ, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		if !strings.HasPrefix(string(cmdline), "envlease-nsinit\x00") ||
			!strings.Contains("\x00"+string(environ), "\x00ENVLEASE_ROOT="+filepath.Join(dir, "envs")+"/") {
			continue
		}
		if l, _ := os.Readlink("/proc/" + e.Name() + "/ns/net"); l != "" && l != own {
			out[l] = pid
		}
	}
	return out
}

// nodeAddress is an IPv4 address of the node other than loopback, "" when
// it has none.
func nodeAddress() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

func (s *stack) tunnelTicket(t *testing.T, id string) environments.Tunnel {
	t.Helper()
	r := s.Do("POST", "/v1/environments/"+id+"/tunnel", apitest.BobToken, nil)
	if r.Status != 200 {
		t.Fatalf("tunnel ticket: %d %s", r.Status, r.Body)
	}
	var tk environments.Tunnel
	r.JSON(t, &tk)
	return tk
}

// getThroughTunnel GETs path of an environment's export target through the
// agent's tunnel and returns the body of a 200.
func (s *stack) getThroughTunnel(t *testing.T, id, target, path string) string {
	t.Helper()
	body, err := s.tryGetThroughTunnel(t, id, target, path)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// tryGetThroughTunnel is getThroughTunnel that returns what went wrong after
// the tunnel opened, for a server that may fail a request now and then (one
// short of processes, say).
func (s *stack) tryGetThroughTunnel(t *testing.T, id, target, path string) (string, error) {
	t.Helper()
	tk := s.tunnelTicket(t, id)
	sess, err := tunnel.Dial(context.Background(), nil, tk.URL, tk.Ticket)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	c, err := sess.Open(context.Background(), target)
	if err != nil {
		return "", fmt.Errorf("open %s of %s: %w", target, id, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: env\r\n\r\n", path); err != nil {
		return "", err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", fmt.Errorf("GET %s of %s through the tunnel: %w", path, id, err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return "", fmt.Errorf("GET %s of %s through the tunnel: %d %s", path, id, res.StatusCode, body)
	}
	return string(body), nil
}

// An agent restarted after a crash finds an environment that ran in
// namespaces of its own by its init, kills it (and so every process of its
// PID namespace), and nothing is left in its network namespace.
func TestRestartedAgentClearsNamespacedLeftovers(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("environments run in namespaces of their own only when the agent runs as root on Linux")
	}
	if err := agent.NamespacesWork(); err != nil {
		t.Skipf("this node cannot make namespaces: %v", err)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "envs", "env_fromacrash")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	// What a crashed agent leaves: an init and its command, with a child.
	c, err := nsinit.Command(nsinit.Config{
		Path: "/bin/sh", Args: []string{"sh", "-c", "sleep 3600 & exec sleep 3600"}, Dir: root,
		Env: []string{"ENVLEASE_ROOT=" + root, "PATH=/usr/bin:/bin"}, UID: -1, GID: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Env = []string{"ENVLEASE_ROOT=" + root}
	if err := c.Start(); err != nil {
		c.Close()
		t.Fatal(err)
	}
	if _, err := c.Begin(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	t.Cleanup(func() { _ = c.Process.Kill(); <-done })
	netNS, _ := os.Readlink("/proc/" + strconv.Itoa(c.Process.Pid) + "/ns/net")
	inNS := func() []int {
		var out []int
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			if l, _ := os.Readlink("/proc/" + e.Name() + "/ns/net"); l == netNS {
				pid, _ := strconv.Atoi(e.Name())
				out = append(out, pid)
			}
		}
		return out
	}
	// Its init, its command and the child, once the shell has forked it.
	for deadline := time.Now().Add(time.Minute); len(inNS()) < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d process(es) in the leftover's network namespace, want its init, its command and the child", len(inNS()))
		}
	}

	s := newStack(t)
	s.runAgentIn(t, dir, time.Second)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the leftover environment's init still runs")
	}
	for deadline := time.Now().Add(time.Minute); len(inNS()) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("processes left in the leftover's network namespace: %v", inNS())
		}
	}
}
