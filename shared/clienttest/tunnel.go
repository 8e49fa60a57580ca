package clienttest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/tunnel"
)

// GetThroughTunnel GETs path of an environment's export target the way a
// client reaches it: through the agent's tunnel, with a ticket asked for
// with token. As root an environment's export listens only inside its own
// network namespace, so the node's address does not answer for it.
func (s *Stack) GetThroughTunnel(t testing.TB, token, env, target, path string) (int, string) {
	t.Helper()
	return GetThroughTunnel(t, s.URL, token, env, target, path)
}

// GetThroughTunnel is Stack.GetThroughTunnel for the API at base.
func GetThroughTunnel(t testing.TB, base, token, env, target, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/environments/"+env+"/tunnel", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("tunnel ticket for %s: %v", env, err)
	}
	var tk environments.Tunnel
	err = json.NewDecoder(res.Body).Decode(&tk)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("tunnel ticket for %s: %d %v", env, res.StatusCode, err)
	}
	sess, err := tunnel.Dial(ctx, nil, tk.URL, tk.Ticket)
	if err != nil {
		t.Fatalf("tunnel to %s: %v", env, err)
	}
	defer sess.Close()
	c, err := sess.Open(ctx, target)
	if err != nil {
		t.Fatalf("open %s of %s through the tunnel: %v", target, env, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: env\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	r, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s of %s through the tunnel: %v", path, env, err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}
