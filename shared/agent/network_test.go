package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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

// readNetworkLog reads environment id's network log as a client does:
// where it is from the API, then the node's endpoint with the ticket.
func readNetworkLog(t *testing.T, s *stack, id string) []byte {
	t.Helper()
	r := s.Do("GET", "/v1/environments/"+id+"/network-log", apitest.BobToken, nil)
	if r.Status != 200 {
		t.Fatalf("GET network-log: %d %s", r.Status, r.Body)
	}
	var l struct {
		Live struct{ URL, Ticket string } `json:"live"`
	}
	r.JSON(t, &l)
	req, _ := http.NewRequest("GET", l.Live.URL+"?env="+id, nil)
	req.Header.Set("Authorization", "Bearer "+l.Live.Ticket)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("the node's network log: %s %s", res.Status, b)
	}
	return b
}

// names stands for the node's resolver in these tests.
type names map[string]netip.Addr

func (n names) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := n[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// netProbe asks for three URLs with curl, no proxy variables set, and
// writes what each gave and its exit code.
const netProbe = `for n in allowed denied byaddr rebound; do
  eval u=\$URL_$n
  curl -sS --max-time 10 "$u" > $n.out 2>&1; echo $? > $n.rc
done
touch done
exec sleep 3600`

// From inside a real environment of a template with network rules (as
// root: namespaces of its own), curl reaches an allowed name without any
// proxy setting, and is refused a denied name (its DNS), an address no
// entry allows and a name that resolves to a private address; the network
// log on the node names the rule of each, with the bytes of the one that
// went through.
func TestNetworkRulesEnvironment(t *testing.T) {
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
	outside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "outside %s %s", r.Host, r.URL.Path)
	}))
	t.Cleanup(outside.Close)
	port := outside.Listener.Addr().(*net.TCPAddr).Port
	// The outside's addresses as the environment sees them; the node's side
	// of each connection goes to the server on the loopback.
	allowedAddr := netip.MustParseAddr("198.18.0.10")
	res := names{"allowed.test": allowedAddr, "denied.test": allowedAddr, "rebound.test": netip.MustParseAddr("10.0.0.7")}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		ap := netip.MustParseAddrPort(addr)
		if ap.Addr() != allowedAddr {
			return nil, fmt.Errorf("the test dials only its own server, not %s", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, outside.Listener.Addr().String())
	}
	p := strconv.Itoa(port)
	env := map[string]string{
		"URL_allowed": "http://allowed.test:" + p + "/a", "URL_denied": "http://denied.test:" + p + "/d",
		"URL_byaddr": "http://198.18.0.11:" + p + "/b", "URL_rebound": "http://rebound.test:" + p + "/r",
	}
	s := newLogStack(t, newKeptLogs(t), domain.Template{Name: "ruled", Network: domain.NetworkRules,
		NetworkRules: &netpolicy.Rules{Allow: []string{"allowed.test", "rebound.test"}, Deny: []string{"denied.test"}},
		Command:      []string{"sh", "-c", netProbe}, Env: env})
	s.Clock.Set(time.Now())
	dir := s.runAgentWith(t, t.TempDir(), time.Second, agent.BoundaryOutside(res, dial,
		netip.AddrPortFrom(allowedAddr, uint16(port)), netip.AddrPortFrom(netip.MustParseAddr("198.18.0.11"), uint16(port))))
	id := s.lease(t, "ruled")
	s.wait(t, id, domain.StateReady)
	root := filepath.Join(dir, "envs", id)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(root, "done")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(root, ".envlease.log"))
			t.Fatalf("the probe did not finish; its log:\n%s", log)
		}
	}
	read := func(n string) (string, string) {
		out, _ := os.ReadFile(filepath.Join(root, n+".out"))
		rc, _ := os.ReadFile(filepath.Join(root, n+".rc"))
		return string(out), strings.TrimSpace(string(rc))
	}
	if out, rc := read("allowed"); rc != "0" || out != "outside allowed.test:"+p+" /a" {
		t.Errorf("allowed: exit %s: %q", rc, out)
	}
	for _, n := range []string{"denied", "byaddr", "rebound"} {
		if out, rc := read(n); rc == "0" {
			t.Errorf("%s went through: %q", n, out)
		}
	}

	// The network log, live from the node with the API's ticket.
	var recs []netstack.Record
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		b := readNetworkLog(t, s, id)
		recs = recs[:0]
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var r netstack.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("a record that is not JSON: %q", sc.Bytes())
			}
			recs = append(recs, r)
		}
		if len(recs) >= 6 || time.Now().After(deadline) {
			break
		}
	}
	has := func(what string, ok func(netstack.Record) bool) {
		t.Helper()
		for _, r := range recs {
			if ok(r) {
				return
			}
		}
		t.Errorf("no record of %s in %+v", what, recs)
	}
	has("the allowed connection with its bytes", func(r netstack.Record) bool {
		return r.Proto == "tcp" && r.Name == "allowed.test" && r.Verdict == "allow" && r.Rule == "allow allowed.test" &&
			r.Sent > 50 && r.Received > int64(len("outside allowed.test:"+p+" /a")) && r.Addr == allowedAddr.String()
	})
	has("the denied name's DNS question", func(r netstack.Record) bool {
		return r.Proto == "dns" && r.Name == "denied.test" && r.Verdict == "deny" && r.Rule == "deny denied.test"
	})
	has("the address no entry allows", func(r netstack.Record) bool {
		return r.Proto == "tcp" && r.Addr == "198.18.0.11" && r.Verdict == "deny" && r.Rule == "no allow entry"
	})
	has("the name rebound to a private address", func(r netstack.Record) bool {
		return r.Proto == "tcp" && r.Name == "rebound.test" && r.Verdict == "deny" && strings.Contains(r.Rule, "private")
	})

	// The refusals are an event of the organization, a few seconds after.
	var refused []domain.Event
	for deadline := time.Now().Add(time.Minute); len(refused) == 0; time.Sleep(200 * time.Millisecond) {
		page, err := s.Store.ListEvents(context.Background(), "acme", domain.EventQuery{Type: domain.EventEnvNetRefused, Limit: 10}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		refused = page.Events
		if len(refused) == 0 && time.Now().After(deadline) {
			t.Fatal("no environment.network.refused event")
		}
	}
	d := refused[0].Data
	var count float64
	switch v := d["count"].(type) {
	case float64:
		count = v
	case int:
		count = float64(v)
	}
	// The denied name's DNS question, the address no entry allows, the
	// rebound name's connection.
	if refused[0].Subject.ID != id || count < 3 || !strings.Contains(fmt.Sprint(d["refusals"]), "deny denied.test") {
		t.Errorf("event %+v, want the refusals counted and listed", refused[0])
	}

	// Once it ended, the network log is kept as an artifact it links to,
	// holding what the node had.
	live := readNetworkLog(t, s, id)
	if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("delete: %d", r.Status)
	}
	s.wait(t, id, domain.StateStopped)
	var kept struct {
		Kept struct{ Artifact, URL string } `json:"kept"`
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		r := s.Do("GET", "/v1/environments/"+id+"/network-log", apitest.BobToken, nil)
		if r.Status == 200 {
			r.JSON(t, &kept)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no kept network log: %d %s", r.Status, r.Body)
		}
	}
	dl, err := http.Get(kept.Kept.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(dl.Body)
	dl.Body.Close()
	if dl.StatusCode != 200 || !bytes.HasPrefix(body, live) {
		t.Errorf("kept network log (%s): %q, want it to begin with what the node served: %q", dl.Status, body, live)
	}
}

// A rule change while a connection loop runs inside a real environment:
// PATCH /v1/environments/{id}/network reaches the node over the node
// protocol, and the loop, which got through until then, is refused from
// then on, with the new rule named in the network log. Over the node
// protocol's WebSocket the change is pushed; a node on the HTTP fallback
// gets it with its next heartbeat's answer, and clearing it lets the loop
// through again. A bad entry is 422
// naming it; an environment of a template without a boundary has no rules.
func TestNetworkRulesChangeWhileRunning(t *testing.T) {
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
	for _, ws := range []bool{true, false} {
		t.Run(map[bool]string{true: "websocket", false: "http fallback"}[ws], func(t *testing.T) {
			ruleChange(t, ws, port, addr, dial)
		})
	}
}

func ruleChange(t *testing.T, ws bool, port int, addr netip.Addr, dial func(ctx context.Context, network, a string) (net.Conn, error)) {
	loop := `while :; do if curl -sS -m 5 "http://allowed.test:` + strconv.Itoa(port) + `/" >/dev/null 2>&1; then echo ok >> results; else echo fail >> results; fi; sleep 0.1; done`
	templates := []domain.Template{
		{Name: "ruled", Network: domain.NetworkRules, Runtime: "process",
			NetworkRules: &netpolicy.Rules{Allow: []string{"allowed.test"}}, Command: []string{"sh", "-c", loop}},
		{Name: "closed", Runtime: "process", Command: []string{"sleep", "3600"}},
	}
	var s *stack
	if ws {
		s = newSocketStack(t, templates...).stack
	} else {
		s = newStack(t, templates...)
	}
	s.Clock.Set(time.Now())
	dir := t.TempDir()
	a := s.runAgentReturning(t, dir, time.Second, agent.BoundaryOutside(names{"allowed.test": addr}, dial, netip.AddrPortFrom(addr, uint16(port))))
	if ws {
		waitFor(t, "the node protocol connection", func() bool { return a.Transport() == agent.TransportWebSocket })
	}
	id := s.lease(t, "ruled")
	s.wait(t, id, domain.StateReady)
	results := func() []string {
		b, _ := os.ReadFile(filepath.Join(dir, "envs", id, "results"))
		return strings.Fields(string(b))
	}
	waitFor(t, "the loop to get through", func() bool { r := results(); return len(r) > 0 && r[len(r)-1] == "ok" })

	if r := s.Do("PATCH", "/v1/environments/"+id+"/network", apitest.BobToken, map[string]any{"allow": []string{"ok.test", "bad entry"}}); r.Status != 422 || !strings.Contains(string(r.Body), "bad entry") {
		t.Errorf("a bad entry: %d %s, want 422 naming it", r.Status, r.Body)
	}
	closed := s.lease(t, "closed")
	if r := s.Do("PATCH", "/v1/environments/"+closed+"/network", apitest.BobToken, map[string]any{"deny": []string{"x.test"}}); r.Status != 422 {
		t.Errorf("rules for an environment of network none: %d %s, want 422", r.Status, r.Body)
	}

	r := s.Do("PATCH", "/v1/environments/"+id+"/network", apitest.BobToken, map[string]any{"deny": []string{"allowed.test"}})
	if r.Status != 200 {
		t.Fatalf("PATCH network: %d %s", r.Status, r.Body)
	}
	before := len(results())
	waitFor(t, "the loop to be refused", func() bool { r := results(); return len(r) > before && r[len(r)-1] == "fail" })
	// Once refused it stays refused.
	n := len(results())
	waitFor(t, "three more tries", func() bool { return len(results()) >= n+3 })
	if r := results(); slices.Contains(r[n:], "ok") {
		t.Errorf("the loop got through again after the change: %v", r[n:])
	}
	var recs []netstack.Record
	sc := bufio.NewScanner(bytes.NewReader(readNetworkLog(t, s, id)))
	for sc.Scan() {
		var rec netstack.Record
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			recs = append(recs, rec)
		}
	}
	var allowed, denied int
	for _, rec := range recs {
		switch {
		case rec.Proto == "tcp" && rec.Verdict == "allow" && rec.Rule == "allow allowed.test" && rec.Received > 0:
			allowed++
		case rec.Proto == "dns" && rec.Verdict == "deny" && rec.Rule == "deny allowed.test":
			denied++
		}
	}
	if allowed == 0 || denied == 0 {
		t.Errorf("network log: %d connections allowed, %d questions refused by the new rule; want both:\n%+v", allowed, denied, recs)
	}
	// Cleared, the loop gets through again.
	if r := s.Do("PATCH", "/v1/environments/"+id+"/network", apitest.BobToken, map[string]any{"deny": []string{}}); r.Status != 200 {
		t.Fatalf("PATCH network: %d %s", r.Status, r.Body)
	}
	n = len(results())
	waitFor(t, "the loop to get through again", func() bool { r := results(); return len(r) > n && r[len(r)-1] == "ok" })
}

// containerNetProbe resolves the allowed and the denied name with
// busybox's nslookup and sends an HTTP request to the address it got with
// busybox's nc, Host naming the name (the static busybox's wget crashes
// resolving), no proxy settings; it serves what happened on its export.
const containerNetProbe = `mkdir -p /work/www
for n in allowed denied; do
  ip=$(nslookup $n.test 2>/dev/null | awk '/^Address/ && $2 !~ /:53$/ {a=$2} END {print a}')
  if [ -n "$ip" ] && printf 'GET /%s HTTP/1.0\r\nHost: %s.test\r\n\r\n' $n $n | nc -w 10 "$ip" "$OUTSIDE_PORT" > /work/www/$n.raw 2>/work/www/$n.err && grep -q "^HTTP/1.[01] 200" /work/www/$n.raw; then
    sed '1,/^\r$/d' /work/www/$n.raw > /work/www/$n.out; echo 0 > /work/www/$n.rc
  else echo 1 > /work/www/$n.rc; fi
done
exec httpd -f -p "$PORT" -h /work/www`

// The same boundary in the container runtime: an image's program, with the
// resolv.conf the agent writes, reaches the allowed name and is refused the
// denied one, and the network log names both.
func TestNetworkRulesContainer(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("network boundaries need the agent to run as root on Linux")
	}
	if err := netstack.Probe(); err != nil {
		t.Skip(err)
	}
	ref := busyboxRef(t)
	outside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "outside %s", r.URL.Path)
	}))
	t.Cleanup(outside.Close)
	port := outside.Listener.Addr().(*net.TCPAddr).Port
	addr := netip.MustParseAddr("198.18.0.10")
	dial := func(ctx context.Context, network, a string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, outside.Listener.Addr().String())
	}
	p := strconv.Itoa(port)
	s := newStack(t, domain.Template{
		Name: "boxnet", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref}, Command: []string{"sh", "-c", containerNetProbe},
		Workdir: "/work", Exports: map[string]domain.Export{"web": {Port: 8080}},
		Network: domain.NetworkRules, NetworkRules: &netpolicy.Rules{Allow: []string{"allowed.test"}, Deny: []string{"denied.test"}},
		Env: map[string]string{"OUTSIDE_PORT": p},
	})
	s.Clock.Set(time.Now())
	s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) {
		c.ReadyTimeout = time.Minute
		agent.BoundaryOutside(names{"allowed.test": addr, "denied.test": addr}, dial, netip.AddrPortFrom(addr, uint16(port)))(c)
	})
	id := s.lease(t, "boxnet")
	env := s.waitLong(t, id, domain.StateReady)
	target := env.Exports[0].Target
	if got := s.getThroughTunnel(t, id, target, "/allowed.rc"); got != "0\n" {
		t.Errorf("allowed: exit %q: %s", got, s.getThroughTunnel(t, id, target, "/allowed.err"))
	}
	if got := s.getThroughTunnel(t, id, target, "/allowed.out"); got != "outside /allowed" {
		t.Errorf("allowed: %q", got)
	}
	if got := s.getThroughTunnel(t, id, target, "/denied.rc"); got != "1\n" {
		t.Errorf("denied: exit %q", got)
	}
	log := string(readNetworkLog(t, s, id))
	for _, want := range []string{`"name":"allowed.test","nameFrom":"host"`, `"rule":"allow allowed.test","verdict":"allow"`, `"name":"denied.test","type":"A","rule":"deny denied.test","verdict":"deny"`} {
		if !strings.Contains(log, want) {
			t.Errorf("network log lacks %s:\n%s", want, log)
		}
	}
}

// A warm environment behind a boundary, handed to a lease that narrows its
// template's policy: the lease's rules apply from the hand-over (its DNS
// questions for the name the lease denies are refused, in the network log
// of the lease's environment), while the warm environment the pool starts
// next, under its template's policy alone, gets through.
func TestNetworkRulesWarmEnvironment(t *testing.T) {
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
	s := newStack(t, domain.Template{Name: "warmnet", Network: domain.NetworkRules, Runtime: "process", Warm: 1,
		NetworkRules: &netpolicy.Rules{Allow: []string{"allowed.test"}}, Command: []string{"sh", "-c", loop}})
	s.Clock.Set(time.Now())
	dir := t.TempDir()
	logs := &lockedBuffer{}
	s.runAgentWith(t, dir, time.Second, func(c *agent.Config) {
		c.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		agent.BoundaryOutside(names{"allowed.test": addr}, dial, netip.AddrPortFrom(addr, uint16(port)))(c)
	})
	// Each warm environment's loop writes its results in its own folder
	// (the pool starts another once one is handed over).
	results := func() map[string][]string {
		out := map[string][]string{}
		m, _ := filepath.Glob(filepath.Join(dir, "envs", "*", "results"))
		for _, f := range m {
			b, _ := os.ReadFile(f)
			out[f] = strings.Fields(string(b))
		}
		return out
	}
	waitFor(t, "a warm environment's loop to get through", func() bool {
		for _, r := range results() {
			if len(r) > 0 && r[len(r)-1] == "ok" {
				return true
			}
		}
		return false
	})
	waitFor(t, "the warm environment to be ready", func() bool { return len(logs.records("INFO", "warm environment ready")) > 0 })
	r := s.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{"template": "warmnet", "network": map[string]any{"deny": []string{"allowed.test"}}})
	if r.Status != 201 {
		t.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	var leased struct{ Environment domain.Environment }
	r.JSON(t, &leased)
	id := leased.Environment.ID
	s.wait(t, id, domain.StateReady)
	waitFor(t, "the lease's rules in its network log", func() bool {
		return strings.Contains(string(readNetworkLog(t, s, id)), `"name":"allowed.test","type":"A","rule":"deny allowed.test","verdict":"deny"`)
	})
	if len(logs.records("INFO", "handed a warm environment")) != 1 {
		t.Fatal("the lease was not handed the warm environment")
	}
	// The handed-over loop got through before and is refused since; the
	// next warm one (the template's policy only) gets through.
	waitFor(t, "the handed-over loop to be refused", func() bool {
		for _, r := range results() {
			if len(r) > 1 && r[0] == "ok" && r[len(r)-1] == "fail" {
				return true
			}
		}
		return false
	})
	waitFor(t, "the next warm environment to get through", func() bool {
		for f, r := range results() {
			if strings.Contains(f, "/warm-") && len(r) > 0 && r[len(r)-1] == "ok" {
				return true
			}
		}
		return false
	})
}
