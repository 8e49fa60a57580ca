package tunnel_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/envlease/envlease/shared/tunnel"
)

// upgrades records the Upgrade header of every request that reaches the
// agent, and can stand for a proxy that passes on nothing but WebSockets.
type upgrades struct {
	mu      sync.Mutex
	seen    []string
	wsOnly  bool
	handler http.Handler
}

func (u *upgrades) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	up := strings.ToLower(r.Header.Get("Upgrade"))
	u.mu.Lock()
	u.seen = append(u.seen, up)
	u.mu.Unlock()
	if u.wsOnly && up != "websocket" {
		http.Error(w, "this proxy passes on WebSockets only", http.StatusBadRequest)
		return
	}
	u.handler.ServeHTTP(w, r)
}

func (u *upgrades) all() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

// A tunnel runs on the upgraded connection when it can, on a WebSocket when
// asked for one or when what is in front of the agent passes on nothing
// else; on each, bytes and half-closes go through, and the agent's
// refusals read the same.
func TestTransports(t *testing.T) {
	cases := []struct {
		name   string
		dial   tunnel.Dialer
		wsOnly bool
		tls    bool     // TLS in front, offering HTTP/2 (which has no upgrades)
		want   []string // the upgrades the agent was asked for
	}{
		{"upgrade", nil, false, false, []string{tunnel.Protocol}},
		{"websocket", tunnel.WebSocketDialer(nil), false, false, []string{"websocket"}},
		{"websocket-only proxy", tunnel.UpgradeDialer(nil), true, false, []string{tunnel.Protocol, "websocket"}},
		{"upgrade over TLS", nil, false, true, []string{tunnel.Protocol}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, nil)
			web := newEcho(t, "web")
			n.run("env_1", web.addr)
			u := &upgrades{wsOnly: tc.wsOnly, handler: n.h}
			srv := httptest.NewUnstartedServer(u)
			url := "ws://" + srv.Listener.Addr().String() + tunnel.Path
			if tc.tls {
				srv.EnableHTTP2 = true
				srv.StartTLS()
				tc.dial = tunnel.UpgradeDialer(srv.Client())
				url = "wss://" + srv.Listener.Addr().String() + tunnel.Path
			} else {
				srv.Start()
			}
			t.Cleanup(srv.Close)

			// The session outlives the context it was dialled with.
			ctx, cancel := context.WithCancel(context.Background())
			s, err := tunnel.Dial(ctx, tc.dial, url, n.ticket("env_1", []string{web.addr}, nil))
			cancel()
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			if got := u.all(); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("the agent was asked for %q, want %q", got, tc.want)
			}
			c, err := s.Open(context.Background(), web.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := say(t, c, "hello"); got != "web: hello" {
				t.Fatalf("through the tunnel: %q", got)
			}
			// A half-close reaches the target, which then ends its side.
			if _, err := io.WriteString(c, "last\n"); err != nil {
				t.Fatal(err)
			}
			if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			rest, err := io.ReadAll(c)
			if err != nil || string(rest) != "web: last\n" {
				t.Fatalf("after the half-close: %q, %v", rest, err)
			}

			_, err = tunnel.Dial(context.Background(), tc.dial, url, "")
			refusedWith(t, err, http.StatusUnauthorized, "takes a ticket")
			_, err = tunnel.Dial(context.Background(), tc.dial, url, n.ticket("env_2", []string{web.addr}, nil))
			refusedWith(t, err, http.StatusForbidden, "env_2 is not running")
		})
	}
}

// The agent takes the upgrade only as it is asked for, and answers it the
// way HTTP answers upgrades.
func TestUpgradeAnswer(t *testing.T) {
	n := newNode(t, nil)
	web := newEcho(t, "web")
	n.run("env_1", web.addr)
	addr := strings.TrimPrefix(strings.TrimSuffix(n.url, tunnel.Path), "ws://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "GET " + tunnel.Path + " HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + n.ticket("env_1", []string{web.addr}, nil) +
		"\r\nConnection: keep-alive, Upgrade\r\nUpgrade: " + tunnel.Protocol + "\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 0, 256)
	buf := make([]byte, 1)
	for !strings.HasSuffix(string(head), "\r\n\r\n") {
		if _, err := c.Read(buf); err != nil {
			t.Fatalf("reading the answer %q: %v", head, err)
		}
		head = append(head, buf[0])
	}
	want := "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + tunnel.Protocol + "\r\n\r\n"
	if string(head) != want {
		t.Fatalf("the answer: %q, want %q", head, want)
	}
}

// Bytes come through whole and in order, both ways, over each transport,
// in bursts large and small (frames are split, headers gathered with their
// bodies, pipes change buffers).
func TestBulkBytesIntact(t *testing.T) {
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
			go func() { // mirror: sends back what it reads, then ends
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	target := ln.Addr().String()
	data := make([]byte, 3<<20+12345)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		dial tunnel.Dialer
	}{{"upgrade", nil}, {"websocket", tunnel.WebSocketDialer(nil)}} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, nil)
			n.run("env_1", target)
			s, err := tunnel.Dial(context.Background(), tc.dial, n.url, n.ticket("env_1", []string{target}, nil))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			c, err := s.Open(context.Background(), target)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			errs := make(chan error, 1)
			go func() {
				// Writes of many sizes: a byte, a header's length, a frame and more.
				rest := data
				for i := 0; len(rest) > 0; i++ {
					k := min(len(rest), []int{1, 12, 1000, 300 << 10, 1 << 20}[i%5])
					if _, err := c.Write(rest[:k]); err != nil {
						errs <- err
						return
					}
					rest = rest[k:]
				}
				errs <- c.(interface{ CloseWrite() error }).CloseWrite()
			}()
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("got %d bytes back, want the %d sent, unchanged", len(got), len(data))
			}
		})
	}
}
