package agent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/netstack"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/netpolicy"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/secrets"
)

// secretProbe runs inside the environment: curl to the bound host (no
// proxy, no CA option: the variables the agent set name the bundle), then
// a search of everything the environment can read for the secret, which
// it is given only rot13-encoded (ENC) and decodes into grep's pattern
// pipe, so the value is in no file, argument or environment variable of
// its own. The same search for CONTROL, whose decoded value the test wrote
// into the environment's folder, proves the search finds what is there.
const secretProbe = `curl -sS --max-time 20 https://api.example.com/hello > curl.out 2> curl.err; echo $? > curl.rc
dec() { printf '%s\n' "$1" | tr 'A-Za-z' 'N-ZA-Mn-za-m'; }
dec "$CONTROL" | grep -rlsF -D skip --exclude-dir=proc --exclude-dir=sys -f - "$HOME" > control.hits
dec "$ENC" | grep -rlsF -D skip --exclude-dir=proc --exclude-dir=sys -f - / > fs.hits
dec "$ENC" | grep -lsF -f - /proc/[0-9]*/environ /proc/[0-9]*/cmdline > proc.hits
touch done
exec sleep 3600`

func rot13(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return 'a' + (r-'a'+13)%26
		case r >= 'A' && r <= 'Z':
			return 'A' + (r-'A'+13)%26
		}
		return r
	}, s)
}

// randomWord is letters only, so its rot13 differs in every byte.
func randomWord(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = 'a' + b[i]%26
	}
	return string(b)
}

// From inside a real environment (process runtime, as root) whose
// template binds a secret to api.example.com: curl with no proxy setting
// and no CA option reaches the test's TLS server (its own test CA, which
// the boundary is told to trust), and the server sees the header with the
// secret; the environment searches its whole filesystem, its processes'
// environments and command lines for the secret and finds nothing (while
// the same search finds a control value written into its folder); the
// network log names the secret added, never its value, and neither it, the
// agent's log nor anything in the agent's folder holds the value.
func TestSecretAddedAtBoundary(t *testing.T) {
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
	value := "tok" + randomWord(40)
	control := "ctl" + randomWord(40)

	var mu sync.Mutex
	var seen []string
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprintf(w, "hello from %s", r.Host)
	}))
	t.Cleanup(server.Close)
	roots := x509.NewCertPool()
	roots.AddCert(server.Certificate()) // its certificate names example.com and *.example.com

	addr := netip.MustParseAddr("198.18.0.20")
	res := names{"api.example.com": addr}
	dial := func(ctx context.Context, network, a string) (net.Conn, error) {
		if netip.MustParseAddrPort(a) != netip.AddrPortFrom(addr, 443) {
			return nil, fmt.Errorf("the test dials only its own server, not %s", a)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, server.Listener.Addr().String())
	}

	tpl := domain.Template{Name: "bound", Network: domain.NetworkRules,
		NetworkRules: &netpolicy.Rules{Allow: []string{"api.example.com"}},
		Secrets:      []domain.SecretBinding{{Secret: "TEST_TOKEN", Hosts: []string{"api.example.com"}, Header: "Authorization: Bearer {secret}"}},
		Command:      []string{"sh", "-c", secretProbe},
		Env:          map[string]string{"ENC": rot13(value), "CONTROL": rot13(control)}}
	if err := tpl.ValidateLimits(); err != nil {
		t.Fatal(err)
	}
	s := newSecretStack(t, tpl)

	// Not set yet: the lease is refused, naming it.
	if r := s.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{"template": "bound"}); r.Status != 422 || !strings.Contains(string(r.Body), "TEST_TOKEN") {
		t.Fatalf("lease before the secret is set: %d %s", r.Status, r.Body)
	}
	if r := s.Do("PUT", "/v1/secrets/TEST_TOKEN", apitest.AliceToken, map[string]any{"value": value}); r.Status != 200 || bytes.Contains(r.Body, []byte(value)) {
		t.Fatalf("set: %d %s", r.Status, r.Body)
	}

	var agentLog bytes.Buffer
	var logMu sync.Mutex
	dir := t.TempDir()
	s.runAgentWith(t, dir, time.Second, func(c *agent.Config) {
		agent.BoundaryOutside(res, dial, netip.AddrPortFrom(addr, 443))(c)
		agent.BoundaryRoots(roots)(c)
		c.Log = slog.New(slog.NewJSONHandler(lockedWriter{&logMu, &agentLog}, nil))
	})
	id := s.lease(t, "bound")
	s.wait(t, id, domain.StateReady)
	root := filepath.Join(dir, "envs", id)
	// The control value, in a file of the environment's own folder.
	if err := os.WriteFile(filepath.Join(root, "control.txt"), []byte(control+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(root, "done")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(root, ".envlease.log"))
			t.Fatalf("the probe did not finish; its log:\n%s", log)
		}
	}
	read := func(n string) string {
		b, _ := os.ReadFile(filepath.Join(root, n))
		return strings.TrimSpace(string(b))
	}
	if rc := read("curl.rc"); rc != "0" || read("curl.out") != "hello from api.example.com" {
		t.Fatalf("curl from inside: rc %s, out %q, err %q", rc, read("curl.out"), read("curl.err"))
	}
	mu.Lock()
	got := append([]string(nil), seen...)
	mu.Unlock()
	if len(got) != 1 || got[0] != "api.example.com Bearer "+value {
		t.Fatalf("the server saw %d requests, want one with the secret's header (got %d chars of Authorization)", len(got), len(strings.Join(got, "")))
	}
	if !strings.Contains(read("control.hits"), "control.txt") {
		t.Fatalf("the environment's search did not find the control value in its folder: %q", read("control.hits"))
	}
	if h := read("fs.hits"); h != "" {
		t.Fatalf("the secret is in files the environment reads: %s", h)
	}
	if h := read("proc.hits"); h != "" {
		t.Fatalf("the secret is in the environment of, or arguments to, a process it sees: %s", h)
	}

	netlog := readNetworkLog(t, s.stack, id)
	if bytes.Contains(netlog, []byte(value)) {
		t.Fatal("the network log holds the secret's value")
	}
	if !bytes.Contains(netlog, []byte(`"name":"api.example.com"`)) || !bytes.Contains(netlog, []byte(`"secrets":["TEST_TOKEN"]`)) {
		t.Fatalf("the network log does not mark the request as having had TEST_TOKEN added:\n%s", netlog)
	}
	// Nothing the agent keeps (the environment's log, the network logs,
	// its state) nor its own log holds the value.
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if holds, err := fileHolds(p, []byte(value)); err != nil {
			return err
		} else if holds {
			return fmt.Errorf("%s holds the secret's value", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	logMu.Lock()
	leaked := bytes.Contains(agentLog.Bytes(), []byte(value))
	logMu.Unlock()
	if leaked {
		t.Fatal("the agent's log holds the secret's value")
	}
}

// secretStack is the agent tests' stack with secrets: the nodes group that
// opens them for nodes, the secrets group, and environments.
type secretStack struct {
	*stack
}

func newSecretStack(t *testing.T, templates ...domain.Template) secretStack {
	t.Helper()
	k := newKeptLogs(t)
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		sec := secrets.NewService(e.Store, e.SecretKeys(), e.Clock, e.Log)
		svc := nodes.NewService(e.Store, k, e.Clock, nodes.Options{HeartbeatInterval: 200 * time.Millisecond, PollMax: 20 * time.Millisecond, Secrets: sec})
		return [][]httpapi.Route{nodes.Routes(svc), secrets.Routes(sec),
			environments.Routes(environments.NewService(e.Store, e.Clock, environments.WithTemplateTTL(0), environments.WithLinks(k)))}
	})
	k.store, k.now = e.Store, e.Clock.Now
	for _, tpl := range templates {
		tpl.Pools = []string{"local"}
		tpl.Timeouts = domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(time.Hour)}
		tpl.Quota = domain.Quota{MaxLeases: 5}
		if err := e.Store.PutTemplate(context.Background(), "acme", tpl); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(apitest.CheckedHandler(t, e.Handler))
	t.Cleanup(srv.Close)
	e.Clock.Set(time.Now())
	return secretStack{&stack{Env: e, url: srv.URL}}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// fileHolds says whether the file at p holds needle, reading only its data:
// the agent's folder holds sparse disk images of several GiB (the
// environments' and the boxes made ahead), whose holes read as zeros.
func fileHolds(p string, needle []byte) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return false, nil // gone since the walk listed it
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	buf := make([]byte, 1<<20)
	var off int64
	for off < fi.Size() {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if err != nil {
			return false, nil // ENXIO: no data past off
		}
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return false, err
		}
		// A match may straddle two reads: each read starts len(needle)-1
		// bytes before the last one ended.
		for pos := data; pos < hole; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), hole-pos)], pos)
			if bytes.Contains(buf[:n], needle) {
				return true, nil
			}
			if err != nil || n < len(needle) {
				break
			}
			pos += int64(n - len(needle) + 1)
		}
		off = hole
	}
	return false, nil
}
