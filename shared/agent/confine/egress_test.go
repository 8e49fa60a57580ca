package confine

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestEgressPort(t *testing.T) {
	for _, c := range []struct {
		ports map[string]int
		want  int
	}{
		{nil, 3128},
		{map[string]int{"web": 8080}, 3128},
		{map[string]int{"squid": 3128}, 3129},
		{map[string]int{"a": 3128, "b": 3129, "c": 3131}, 3130},
	} {
		if got := EgressPortFor(c.ports); got != c.want {
			t.Errorf("EgressPortFor(%v) = %d, want %d", c.ports, got, c.want)
		}
	}
}

// startEgress serves a proxy on the loopback that may reach only allow
// among the loopback's addresses, and whose node owns nodeAddr.
func startEgress(t *testing.T, nodeAddr netip.Addr, allow ...netip.AddrPort) (*EgressProxy, string, *bytes.Buffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := EgressGuard{allow: map[netip.AddrPort]bool{}, nodeAddrs: func() []netip.Addr { return append(interfaceAddrs(), nodeAddr) }}
	for _, a := range allow {
		g.allow[a] = true
	}
	var logs bytes.Buffer
	p := ServeEgress(ln, g, slog.New(slog.NewJSONHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(p.Close)
	return p, ln.Addr().String(), &logs
}

// The proxy forwards http:// and CONNECT to an allowed address, and answers
// 403 with the reason for every address that is not public or is the
// node's, whether named by address or by a name that resolves to it.
func TestEgressProxyRefusesWhatIsNotPublic(t *testing.T) {
	outside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "outside %s", r.URL.Path)
	}))
	defer outside.Close()
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the proxy reached a loopback server it must refuse: %s", r.URL)
	}))
	defer local.Close()
	outsideAP := netip.MustParseAddrPort(outside.Listener.Addr().String())
	localPort := local.Listener.Addr().(*net.TCPAddr).Port
	node := netip.MustParseAddr("198.41.0.4") // public, but taken as the node's own here
	_, proxy, logs := startEgress(t, node, outsideAP)

	for _, c := range []struct {
		name, method, target string
		status               int
		reason               string
	}{
		{"http to the allowed outside", "GET", "http://" + outsideAP.String() + "/hello", 200, "outside /hello"},
		{"CONNECT to the allowed outside", "CONNECT", outsideAP.String(), 200, "outside /hello"},
		{"http to the node's loopback", "GET", fmt.Sprintf("http://127.0.0.1:%d/", localPort), 403, "loopback"},
		{"CONNECT to the node's loopback", "CONNECT", fmt.Sprintf("127.0.0.1:%d", localPort), 403, "loopback"},
		{"CONNECT by name to the loopback", "CONNECT", fmt.Sprintf("localhost:%d", localPort), 403, "loopback"},
		{"CONNECT to a mapped loopback", "CONNECT", fmt.Sprintf("[::ffff:127.0.0.1]:%d", localPort), 403, "loopback"},
		{"CONNECT to IPv6 loopback", "CONNECT", fmt.Sprintf("[::1]:%d", localPort), 403, "loopback"},
		{"http to the metadata address", "GET", "http://169.254.169.254/latest/meta-data/", 403, "link-local"},
		{"CONNECT to the metadata address", "CONNECT", "169.254.169.254:80", 403, "link-local"},
		{"http to a private address", "GET", "http://10.1.2.3/", 403, "private"},
		{"CONNECT to a private address", "CONNECT", "192.168.0.1:443", 403, "private"},
		{"CONNECT to the node's own address", "CONNECT", node.String() + ":443", 403, "the node's own address"},
		{"http to the node's own address", "GET", "http://" + node.String() + "/", 403, "the node's own address"},
		{"CONNECT to carrier-grade NAT", "CONNECT", "100.64.0.1:443", 403, "carrier-grade NAT"},
		{"a request that is not a proxy's", "GET", "/", 400, "absolute http://"},
		{"https through plain forwarding", "GET", "https://" + outsideAP.String() + "/", 400, "CONNECT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body := throughProxy(t, proxy, c.method, c.target)
			if status != c.status || !strings.Contains(body, c.reason) {
				t.Errorf("%s %s: %d %q, want %d with %q", c.method, c.target, status, body, c.status, c.reason)
			}
		})
	}
	if !strings.Contains(logs.String(), "egress refused") {
		t.Errorf("refusals are not logged: %s", logs)
	}
}

// throughProxy sends one request to the proxy; for a CONNECT that is
// answered 200 it then GETs /hello through the stream.
func throughProxy(t *testing.T, proxy, method, target string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard
	host := target
	if method != "CONNECT" {
		host = "example"
	}
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\n\r\n", method, target, host)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	if method == "CONNECT" && res.StatusCode == 200 {
		fmt.Fprintf(c, "GET /hello HTTP/1.1\r\nHost: outside\r\nConnection: close\r\n\r\n")
		if res, err = http.ReadResponse(br, nil); err != nil {
			t.Fatal(err)
		}
	}
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// Closing the proxy ends its open CONNECT streams and returns every
// goroutine it started, and logs what went through.
func TestEgressProxyCloseLeavesNothing(t *testing.T) {
	outside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer outside.Close()
	outsideAP := netip.MustParseAddrPort(outside.Listener.Addr().String())
	before := runtime.NumGoroutine()

	p, proxy, logs := startEgress(t, netip.Addr{}, outsideAP)
	if status, _ := throughProxy(t, proxy, "GET", "http://"+outsideAP.String()+"/"); status != 200 {
		t.Fatalf("GET through the proxy: %d", status)
	}
	// A stream left open, and a connection idle in the proxy's pool.
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", outsideAP)
	br := bufio.NewReader(c)
	if res, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || res.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", res, err)
	}

	p.Close()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard
	if _, err := br.ReadByte(); err == nil {
		t.Error("the CONNECT stream is still open after close")
	}
	if _, err := net.Dial("tcp", proxy); err == nil {
		t.Error("the proxy still accepts connections after close")
	}
	outside.CloseClientConnections()
	for deadline := time.Now().Add(time.Minute); runtime.NumGoroutine() > before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after close:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
	}
	if l := logs.String(); !strings.Contains(l, `"msg":"egress totals","connections":2`) || !strings.Contains(l, `"bytesReceived"`) {
		t.Errorf("totals not logged: %s", l)
	}
}

// syncWriter serializes writes to w, which the proxy's goroutines share.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// Idle connections to the proxy are bounded: past egressMaxConns, a new one
// is not served (it waits in the backlog) until another closes, so an
// environment cannot spend the agent's descriptors, which every environment
// of the node shares.
func TestEgressProxyBoundsConnections(t *testing.T) {
	outside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer outside.Close()
	outsideAP := netip.MustParseAddrPort(outside.Listener.Addr().String())
	_, proxy, _ := startEgress(t, netip.Addr{}, outsideAP)

	idle := make([]net.Conn, 0, egressMaxConns)
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range egressMaxConns {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	// One more connection is accepted by the kernel but not served.
	extra, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	fmt.Fprintf(extra, "GET http://%s/ HTTP/1.1\r\nHost: %[1]s\r\n\r\n", outsideAP)
	_ = extra.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := extra.Read(make([]byte, 1)); err == nil {
		t.Fatalf("a connection past %d was served", egressMaxConns)
	}
	// Once one closes, it is served.
	idle[0].Close()
	_ = extra.SetReadDeadline(time.Now().Add(time.Minute))
	res, err := http.ReadResponse(bufio.NewReader(extra), nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("after a slot freed: %v %v", res, err)
	}
}
