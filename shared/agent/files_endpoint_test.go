//go:build linux

package agent_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/envfs"
	"github.com/envlease/envlease/shared/envfiles"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// The files endpoint opens files only to a files ticket of this node and
// organization for an environment it runs, only at or below the ticket's
// path, changes them only with a write ticket, and bounds an environment's
// requests at once; each refusal says why with its code and reason.
func TestFilesEndpointTickets(t *testing.T) {
	key := bytes.Repeat([]byte{7}, ticket.KeySize)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "work", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "work", "sub", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var slots atomic.Int64
	h := agent.NewFilesHandler(agent.FilesConfig{
		Identity: func() (agent.TunnelIdentity, bool) {
			return agent.TunnelIdentity{Org: "acme", Node: "node_1", Key: key}, true
		},
		Env: func(id string) (agent.FilesEnv, bool) {
			if id != "env_1" {
				return agent.FilesEnv{}, false
			}
			return agent.FilesEnv{Root: envfs.Root{Dir: dir, Home: "work", UID: os.Getuid(), GID: os.Getgid()}, Slots: &slots}, true
		},
		MaxPerEnv: 2,
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	exp := time.Now().Add(time.Minute).Unix()
	sign := func(c ticket.Claims) string {
		tk, err := ticket.Sign(key, c)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	read := ticket.Claims{Org: "acme", Env: "env_1", Node: "node_1", Exp: exp, Open: ticket.OpenFiles, Path: "/"}
	with := func(f func(*ticket.Claims)) string { c := read; f(&c); return sign(c) }
	for _, tc := range []struct {
		name, method, route, tk string
		status                  int
		reason                  string
	}{
		{"a read", "GET", "/read?path=sub/f", sign(read), 200, ""},
		{"no ticket", "GET", "/read?path=sub/f", "", 401, envfiles.ReasonTicket},
		{"another key", "GET", "/read?path=sub/f", func() string {
			tk, _ := ticket.Sign(bytes.Repeat([]byte{8}, ticket.KeySize), read)
			return tk
		}(), 401, envfiles.ReasonTicket},
		{"expired", "GET", "/read?path=sub/f", with(func(c *ticket.Claims) { c.Exp = time.Now().Add(-time.Hour).Unix() }), 401, envfiles.ReasonTicket},
		{"an exec ticket", "GET", "/read?path=sub/f", with(func(c *ticket.Claims) { c.Open = ticket.OpenExec }), 403, envfiles.ReasonTicket},
		{"a tunnel ticket", "GET", "/read?path=sub/f", with(func(c *ticket.Claims) { c.Open = "" }), 403, envfiles.ReasonTicket},
		{"another node", "GET", "/read?path=sub/f", with(func(c *ticket.Claims) { c.Node = "node_2" }), 403, envfiles.ReasonTicket},
		{"another organization", "GET", "/read?path=sub/f", with(func(c *ticket.Claims) { c.Org = "globex" }), 403, envfiles.ReasonTicket},
		{"an environment not here", "GET", "/read?path=sub/f", with(func(c *ticket.Claims) { c.Env = "env_2" }), 404, envfiles.ReasonEnvironmentGone},
		{"a write with a read ticket", "PUT", "/write?path=sub/g", sign(read), 403, envfiles.ReasonReadOnly},
		{"a remove with a read ticket", "POST", "/remove?path=sub/f", sign(read), 403, envfiles.ReasonReadOnly},
		{"outside the ticket's path", "GET", "/read?path=/etc/passwd", with(func(c *ticket.Claims) { c.Path = "/work/sub" }), 403, envfiles.ReasonOutsideTicket},
		{"a sibling of the ticket's path", "GET", "/stat?path=/work/subway", with(func(c *ticket.Claims) { c.Path = "/work/sub" }), 403, envfiles.ReasonOutsideTicket},
		{"within the ticket's path", "GET", "/read?path=/work/sub/missing", with(func(c *ticket.Claims) { c.Path = "sub" }), 404, envfiles.ReasonNotFound},
		{"within the ticket's path, relative", "GET", "/read?path=sub/f", with(func(c *ticket.Claims) { c.Path = "sub" }), 200, ""},
		{"a write", "PUT", "/write?path=sub/g&mode=0600", with(func(c *ticket.Claims) { c.Write = true }), 200, ""},
		{"an unknown parameter", "GET", "/read?path=sub/f&follow=1", sign(read), 400, envfiles.ReasonBadParameter},
		{"a bad mode", "PUT", "/write?path=sub/g&mode=999", with(func(c *ticket.Claims) { c.Write = true }), 400, envfiles.ReasonBadParameter},
		{"an unknown route", "GET", "/chmod?path=sub/f", sign(read), 400, envfiles.ReasonBadParameter},
		{"the wrong method", "POST", "/read?path=sub/f", sign(read), 405, envfiles.ReasonBadParameter},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+"/files"+tc.route, strings.NewReader("body"))
		if tc.tk != "" {
			req.Header.Set("Authorization", "Bearer "+tc.tk)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e envfiles.Error
		if res.StatusCode >= 300 {
			_ = json.NewDecoder(res.Body).Decode(&e)
		}
		res.Body.Close()
		if res.StatusCode != tc.status || e.Reason != tc.reason || (tc.status >= 300 && (e.Code == "" || e.Message == "")) {
			t.Errorf("%s: %d %+v, want %d %s", tc.name, res.StatusCode, e, tc.status, tc.reason)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "work", "sub", "g")); string(b) != "body" {
		t.Errorf("the write: %q", b)
	}
	if slots.Load() != 0 {
		t.Errorf("%d slots held after every request ended", slots.Load())
	}
	// Beyond MaxPerEnv at once: busy, 503, to retry.
	slots.Store(2)
	req, _ := http.NewRequest("GET", srv.URL+"/files/stat?path=sub", nil)
	req.Header.Set("Authorization", "Bearer "+sign(read))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 503 || res.Header.Get("Retry-After") == "" {
		t.Errorf("over the bound: %d %v", res.StatusCode, res.Header)
	}
}
