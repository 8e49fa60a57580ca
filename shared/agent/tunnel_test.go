package agent_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/tunnel"
)

// The agent registers its tunnel endpoint; a ticket from the API opens a
// tunnel to a ready environment's export, and the environment's own server
// answers through it. When the environment is deleted the agent closes the
// tunnel, and the ticket opens no new one.
func TestAgentServesTunnels(t *testing.T) {
	s := newStack(t, domain.Template{
		Name:    "web",
		Command: []string{"sh", "-c", `echo through-the-tunnel > index.html; exec python3 -m http.server "$PORT" --bind 127.0.0.1`},
		Exports: map[string]domain.Export{"web": {Port: 0}},
	})
	// The agent judges tickets by the real clock, the stack signs them by
	// its own: let them agree.
	s.Clock.Set(time.Now())
	s.runAgent(t, time.Second)
	id := s.lease(t, "web")
	e := s.wait(t, id, domain.StateReady)
	target := e.Exports[0].Target

	r := s.Do("POST", "/v1/environments/"+id+"/tunnel", apitest.BobToken, nil)
	if r.Status != 200 {
		t.Fatalf("tunnel ticket: %d %s", r.Status, r.Body)
	}
	var tk environments.Tunnel
	r.JSON(t, &tk)
	if !strings.HasPrefix(tk.URL, "ws://127.0.0.1:") || !strings.HasSuffix(tk.URL, tunnel.Path) {
		t.Fatalf("tunnel URL %q", tk.URL)
	}
	sess, err := tunnel.Dial(context.Background(), nil, tk.URL, tk.Ticket)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	c, err := sess.Open(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard
	if _, err := io.WriteString(c, "GET /index.html HTTP/1.0\r\nHost: env\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || strings.TrimSpace(string(body)) != "through-the-tunnel" {
		t.Fatalf("through the tunnel: %d %q", res.StatusCode, body)
	}

	if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("delete: %d", r.Status)
	}
	select {
	case <-sess.Done():
	case <-time.After(time.Minute):
		t.Fatal("the tunnel of a deleted environment stays open")
	}
	if _, err := tunnel.Dial(context.Background(), nil, tk.URL, tk.Ticket); !tunnel.IsRefusal(err) {
		t.Fatalf("a ticket of a deleted environment: %v", err)
	}
}
