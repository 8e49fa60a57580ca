//go:build linux

package netstack

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/netguard"
	"github.com/envlease/envlease/shared/netpolicy"
)

// testNet stands for "the outside" in these tests: the environment reaches
// its addresses through the boundary, and the node's side of each
// connection goes to the same port on the node's loopback, where the
// tests' servers listen. Nothing leaves the machine.
var testNet = netip.MustParsePrefix("198.18.0.0/24")

// fakeResolver answers from a table, as the node's resolver would.
type fakeResolver map[string][]netip.Addr

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// records keeps what a boundary records.
type records struct {
	mu sync.Mutex
	rs []Record
}

func (r *records) Record(x Record) {
	r.mu.Lock()
	r.rs = append(r.rs, x)
	r.mu.Unlock()
}

func (r *records) find(match func(Record) bool) (Record, bool) {
	deadline := time.Now().Add(time.Minute) // a hang guard
	for {
		r.mu.Lock()
		for _, x := range r.rs {
			if match(x) {
				r.mu.Unlock()
				return x, true
			}
		}
		r.mu.Unlock()
		if time.Now().After(deadline) {
			return Record{}, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *records) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, x := range r.rs {
		fmt.Fprintf(&b, "%+v\n", x)
	}
	return b.String()
}

// env is a network namespace of the test's with a boundary in it.
type env struct {
	name string
	h    netns.NsHandle
	b    *Boundary
	log  *records
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes network namespaces and TUN devices")
	}
	if err := Probe(); err != nil {
		t.Skip(err)
	}
}

// newEnv makes a named network namespace (so `ip netns exec` can run
// programs in it) with a boundary of policy p; opts change its Config.
func newEnv(t testing.TB, p netpolicy.Layers, res fakeResolver, opts ...func(*Config)) *env {
	t.Helper()
	name := fmt.Sprintf("envlease-nt-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	var h netns.NsHandle
	err := func() error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		own, err := netns.Get()
		if err != nil {
			return err
		}
		defer own.Close()
		h, err = netns.NewNamed(name)
		if err != nil {
			return err
		}
		return netns.Set(own)
	}()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		_ = netns.DeleteNamed(name)
	})
	// The namespace's resolv.conf, which `ip netns exec` binds over
	// /etc/resolv.conf, names the boundary, as an environment's does.
	dir := "/etc/netns/" + name
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(dir+"/resolv.conf", []byte("nameserver "+StackAddr.String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := &records{}
	cfg := Config{
		Policy:   p,
		Resolver: res,
		Log:      log,
		Guard: func(ap netip.AddrPort) error {
			if testNet.Contains(ap.Addr()) {
				return nil
			}
			if c := netguard.Class(ap.Addr(), false); c != "" {
				return fmt.Errorf("%s is %s", ap.Addr(), c)
			}
			return nil
		},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ap, err := netip.ParseAddrPort(addr)
			if err != nil || !testNet.Contains(ap.Addr()) {
				return nil, fmt.Errorf("the test dials only its own servers, not %s", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ap.Port()))))
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	b, err := Open(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return &env{name: name, h: h, b: b, log: log}
}

// in runs fn with sockets made in the environment's namespace.
func (e *env) in(t testing.TB, fn func() error) error {
	t.Helper()
	return confine.InNamespace(e.h, fn)
}

// dialIn connects from inside the environment.
func (e *env) dialIn(t testing.TB, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := e.in(t, func() error {
		var err error
		c, err = (&net.Dialer{Timeout: 5 * time.Second}).Dial(network, addr)
		return err
	})
	return c, err
}

func (e *env) resolver(t testing.TB) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return e.dialIn(t, network, net.JoinHostPort(StackAddr.String(), "53"))
	}}
}

func serveHTTP(t *testing.T) (port int) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "hello %s, %d bytes", r.Host, len(body))
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

func TestBoundary(t *testing.T) {
	needRoot(t)
	port := serveHTTP(t)
	res := fakeResolver{
		"allowed.test": {netip.MustParseAddr("198.18.0.10")},
		"denied.test":  {netip.MustParseAddr("198.18.0.11")},
		"other.test":   {netip.MustParseAddr("198.18.0.11")},
		"rebound.test": {netip.MustParseAddr("10.9.9.9")},
	}
	p := netpolicy.Layers{netpolicy.MustCompile(netpolicy.ModeRules, netpolicy.Rules{
		Allow: []string{"allowed.test", "rebound.test", "*.wild.test"},
		Deny:  []string{"denied.test"},
	})}
	e := newEnv(t, p, res)
	ctx := context.Background()
	r := e.resolver(t)

	t.Run("dns answers an allowed name", func(t *testing.T) {
		addrs, err := r.LookupNetIP(ctx, "ip4", "allowed.test")
		if err != nil || len(addrs) != 1 || addrs[0] != netip.MustParseAddr("198.18.0.10") {
			t.Fatalf("allowed.test: %v %v", addrs, err)
		}
	})
	t.Run("dns refuses a denied name", func(t *testing.T) {
		if addrs, err := r.LookupNetIP(ctx, "ip4", "denied.test"); err == nil {
			t.Fatalf("denied.test resolved: %v", addrs)
		}
		if _, ok := e.log.find(func(x Record) bool {
			return x.Proto == ProtoDNS && x.Name == "denied.test" && x.Verdict == VerdictDeny && x.Rule == "deny denied.test"
		}); !ok {
			t.Errorf("no DNS refusal recorded:\n%s", e.log)
		}
	})
	t.Run("curl with no proxy settings", func(t *testing.T) {
		out, err := exec.Command("ip", "netns", "exec", e.name, "curl", "-sS", "--noproxy", "*", "-d", "abc",
			"http://allowed.test:"+strconv.Itoa(port)+"/").CombinedOutput()
		if err != nil || string(out) != "hello allowed.test:"+strconv.Itoa(port)+", 3 bytes" {
			t.Fatalf("curl: %v: %s", err, out)
		}
		rec, ok := e.log.find(func(x Record) bool {
			return x.Proto == ProtoTCP && x.Name == "allowed.test" && x.Verdict == VerdictAllow
		})
		if !ok {
			t.Fatalf("no record of the connection:\n%s", e.log)
		}
		if rec.Rule != "allow allowed.test" || rec.Addr != "198.18.0.10" || rec.Port != uint16(port) || rec.Sent == 0 || rec.Received == 0 {
			t.Errorf("record %+v", rec)
		}
	})
	t.Run("an address no entry allows is refused", func(t *testing.T) {
		c, err := e.dialIn(t, "tcp", net.JoinHostPort("198.18.0.11", strconv.Itoa(port)))
		if err == nil {
			c.Close()
			t.Fatal("connected to an address no entry allows")
		}
		if _, ok := e.log.find(func(x Record) bool {
			return x.Proto == ProtoTCP && x.Addr == "198.18.0.11" && x.Verdict == VerdictDeny && x.Rule == "no allow entry"
		}); !ok {
			t.Errorf("no refusal recorded:\n%s", e.log)
		}
	})
	t.Run("a name rebound to a private address is refused", func(t *testing.T) {
		addrs, err := r.LookupNetIP(ctx, "ip4", "rebound.test")
		if err != nil || len(addrs) != 1 {
			t.Fatalf("rebound.test: %v %v", addrs, err)
		}
		c, err := e.dialIn(t, "tcp", net.JoinHostPort(addrs[0].String(), "80"))
		if err == nil {
			c.Close()
			t.Fatal("connected to a private address")
		}
		if rec, ok := e.log.find(func(x Record) bool {
			return x.Proto == ProtoTCP && x.Name == "rebound.test" && x.Verdict == VerdictDeny
		}); !ok || !strings.Contains(rec.Rule, "private") {
			t.Errorf("refusal %+v:\n%s", rec, e.log)
		}
	})
	t.Run("a Host the rules deny is refused on an allowed address", func(t *testing.T) {
		c, err := e.dialIn(t, "tcp", net.JoinHostPort("198.18.0.10", strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if b, err := io.ReadAll(c); len(b) > 0 {
			t.Fatalf("answered: %q %v", b, err)
		}
		if _, ok := e.log.find(func(x Record) bool {
			return x.Proto == ProtoTCP && x.Name == "denied.test" && x.NameFrom == "host" && x.Rule == "deny denied.test"
		}); !ok {
			t.Errorf("no refusal by Host recorded:\n%s", e.log)
		}
	})
	t.Run("an SNI the rules do not allow is refused", func(t *testing.T) {
		c, err := e.dialIn(t, "tcp", net.JoinHostPort("198.18.0.10", strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		tc := tlsClient(c, "other.test")
		if err := tc.Handshake(); err == nil {
			t.Fatal("a TLS handshake naming other.test went through")
		}
		if _, ok := e.log.find(func(x Record) bool {
			return x.Proto == ProtoTCP && x.Name == "other.test" && x.NameFrom == "sni" && x.Rule == "no allow entry"
		}); !ok {
			t.Errorf("no refusal by SNI recorded:\n%s", e.log)
		}
	})
}

func serveEcho(t *testing.T) (tcpPort, udpPort int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, a, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte("echo:"), buf[:n]...), a)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, pc.LocalAddr().(*net.UDPAddr).Port
}

func TestBoundaryStreams(t *testing.T) {
	needRoot(t)
	tcpPort, udpPort := serveEcho(t)
	p := netpolicy.Layers{netpolicy.MustCompile(netpolicy.ModeRules, netpolicy.Rules{Allow: []string{"198.18.0.12"}})}
	e := newEnv(t, p, fakeResolver{})

	t.Run("raw TCP, bytes counted", func(t *testing.T) {
		c, err := e.dialIn(t, "tcp", net.JoinHostPort("198.18.0.12", strconv.Itoa(tcpPort)))
		if err != nil {
			t.Fatal(err)
		}
		const n = 300_000
		go func() {
			_, _ = c.Write(make([]byte, n))
			_ = c.(*net.TCPConn).CloseWrite()
		}()
		got, err := io.Copy(io.Discard, c)
		c.Close()
		if err != nil || got != n {
			t.Fatalf("echoed %d of %d: %v", got, n, err)
		}
		rec, ok := e.log.find(func(x Record) bool { return x.Proto == ProtoTCP && x.Port == uint16(tcpPort) })
		if !ok || rec.Sent != n || rec.Received != n || rec.Rule != "allow 198.18.0.12" || rec.Verdict != VerdictAllow {
			t.Errorf("record %+v (found %v)", rec, ok)
		}
	})
	t.Run("UDP", func(t *testing.T) {
		c, err := e.dialIn(t, "udp", net.JoinHostPort("198.18.0.12", strconv.Itoa(udpPort)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 100)
		for _, msg := range []string{"one", "two"} {
			if _, err := c.Write([]byte(msg)); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			n, err := c.Read(buf)
			if err != nil || string(buf[:n]) != "echo:"+msg {
				t.Fatalf("%q: %q %v", msg, buf[:n], err)
			}
		}
		c.Close()
		// A flow is recorded when it ends: the boundary's close ends it.
		e.b.Close()
		rec, ok := e.log.find(func(x Record) bool { return x.Proto == ProtoUDP && x.Port == uint16(udpPort) })
		if !ok || rec.Sent != 6 || rec.Received != 16 || rec.Verdict != VerdictAllow {
			t.Errorf("record %+v (found %v):\n%s", rec, ok, e.log)
		}
	})
}

func TestBoundaryRuleChange(t *testing.T) {
	needRoot(t)
	tcpPort, _ := serveEcho(t)
	target := net.JoinHostPort("198.18.0.12", strconv.Itoa(tcpPort))
	allow := netpolicy.Layers{netpolicy.MustCompile(netpolicy.ModeRules, netpolicy.Rules{Allow: []string{"198.18.0.0/24"}})}
	deny := netpolicy.Layers{netpolicy.MustCompile(netpolicy.ModeRules, netpolicy.Rules{Allow: []string{"198.18.0.0/24"}, Deny: []string{"198.18.0.12"}})}
	e := newEnv(t, allow, fakeResolver{})

	long, err := e.dialIn(t, "tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()
	// A loop that connects, sends, reads and closes, until refused. It
	// says when its first connection went through, so the change comes
	// after at least one, however slow the machine.
	refused := make(chan int, 1)
	connected := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			c, err := e.dialIn(t, "tcp", target)
			if err != nil {
				refused <- i
				return
			}
			_, _ = c.Write([]byte("x"))
			_, _ = io.ReadFull(c, make([]byte, 1))
			c.Close()
			if i == 0 {
				close(connected)
			}
		}
	}()
	select {
	case <-connected:
	case n := <-refused:
		t.Fatalf("the loop was refused after %d connections, before the change", n)
	case <-time.After(time.Minute):
		t.Fatal("the loop never connected before the change")
	}
	e.b.SetPolicy(deny)
	select {
	case n := <-refused:
		if n == 0 {
			t.Error("the loop never connected before the change")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("new connections still go through after the change")
	}
	_ = long.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := long.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
		t.Fatalf("the open connection was not closed: %v", err)
	}
	if _, ok := e.log.find(func(x Record) bool {
		return x.Proto == ProtoTCP && x.Verdict == VerdictDeny && x.Rule == "deny 198.18.0.12" && strings.Contains(x.Error, "rules changed")
	}); !ok {
		t.Errorf("no record of the connection the change closed:\n%s", e.log)
	}
}

// DNS flows take a place within MaxFlows like any other: with the one
// place held by a connection, a DNS question is refused, recorded with the
// bound as its rule, and answered again once the connection ended.
func TestBoundaryBoundsDNSFlows(t *testing.T) {
	needRoot(t)
	tcpPort, _ := serveEcho(t)
	allow := netpolicy.Layers{netpolicy.MustCompile(netpolicy.ModeRules, netpolicy.Rules{Allow: []string{"198.18.0.0/24", "allowed.test"}})}
	res := fakeResolver{"allowed.test": {netip.MustParseAddr("198.18.0.10")}}
	e := newEnv(t, allow, res, func(c *Config) { c.MaxFlows = 1 })

	held, err := e.dialIn(t, "tcp", net.JoinHostPort("198.18.0.12", strconv.Itoa(tcpPort)))
	if err != nil {
		t.Fatal(err)
	}
	// The connection has its place once it echoes.
	if _, err := held.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(held, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if addrs, err := e.resolver(t).LookupNetIP(ctx, "ip4", "allowed.test"); err == nil {
		t.Fatalf("a DNS question was answered past the bound: %v", addrs)
	}
	if _, ok := e.log.find(func(x Record) bool {
		return x.Port == 53 && x.Verdict == VerdictDeny && strings.Contains(x.Rule, "1 open connections")
	}); !ok {
		t.Errorf("no refusal of the DNS flow at the bound:\n%s", e.log)
	}
	held.Close()
	if _, ok := e.log.find(func(x Record) bool { return x.Proto == ProtoTCP && x.Verdict == VerdictAllow }); !ok {
		t.Fatalf("the held connection never ended:\n%s", e.log)
	}
	// Its place comes back once its copies finished (just after the record).
	deadline := time.Now().Add(10 * time.Second)
	for e.b.open.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if addrs, err := e.resolver(t).LookupNetIP(ctx2, "ip4", "allowed.test"); err != nil || len(addrs) != 1 {
		t.Fatalf("after the connection ended: %v %v", addrs, err)
	}
}

// TLS or HTTP whose name cannot be read is decided on the address alone:
// on an address shared by a name the rules allow and one they deny, it is
// refused (and recorded saying why) unless an entry allows the address.
func TestBoundaryUnnamedIsDecidedOnAddress(t *testing.T) {
	needRoot(t)
	tcpPort, _ := serveEcho(t)
	shared := netip.MustParseAddr("198.18.0.12")
	res := fakeResolver{"allowed.test": {shared}, "denied.test": {shared}}
	p := netpolicy.Layers{netpolicy.MustCompile(netpolicy.ModeRules, netpolicy.Rules{
		Allow: []string{"allowed.test", "198.18.0.13"},
		Deny:  []string{"denied.test"},
	})}
	e := newEnv(t, p, res)
	if _, err := e.resolver(t).LookupNetIP(context.Background(), "ip4", "allowed.test"); err != nil {
		t.Fatal(err)
	}
	split, _ := splitRecord(clientHello(t, "denied.test"))
	h2 := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	// send writes first on a connection to addr and says whether it came
	// back from the echo server.
	send := func(t *testing.T, addr string, first []byte) bool {
		c, err := e.dialIn(t, "tcp", net.JoinHostPort(addr, strconv.Itoa(tcpPort)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(first); err != nil {
			return false
		}
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		got := make([]byte, len(first))
		_, err = io.ReadFull(c, got)
		return err == nil && string(got) == string(first)
	}
	for _, tc := range []struct {
		name  string
		addr  string
		first []byte
		allow bool
		why   string
	}{
		{"a Host the rules allow", "198.18.0.12", []byte("GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"), true, ""},
		{"HTTP/2 with prior knowledge", "198.18.0.12", h2, false, "no Host could be read"},
		{"a ClientHello split across records", "198.18.0.12", split, false, "no server name could be read"},
		{"HTTP/2 to an address an entry allows", "198.18.0.13", h2, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := send(t, tc.addr, tc.first); got != tc.allow {
				t.Fatalf("went through: %v, want %v\n%s", got, tc.allow, e.log)
			}
			if tc.allow {
				return
			}
			if rec, ok := e.log.find(func(x Record) bool {
				return x.Proto == ProtoTCP && x.Verdict == VerdictDeny && x.Addr == tc.addr && strings.Contains(x.Error, tc.why)
			}); !ok || rec.Rule != "no allow entry" || rec.Name != "allowed.test" || rec.NameFrom != "dns" {
				t.Errorf("refusal %+v (found %v):\n%s", rec, ok, e.log)
			}
		})
	}
}
