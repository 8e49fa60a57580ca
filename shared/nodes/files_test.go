package nodes_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// A files ticket is given for a ready environment only, signed with its
// node's key, opening "files" at its path, for writing only when asked;
// a write ticket only once its environment.files event is written, a read
// ticket without one. Another organization gets 404, an environment not
// ready 409, a template with exec: false 403 exec_disabled, a path with ..
// 422.
func TestFilesTicket(t *testing.T) {
	e := newEnv(t)
	off := false
	if err := e.Store.PutTemplate(context.Background(), "acme", domain.Template{Name: "locked", Command: []string{"sleep", "1h"},
		Pools: []string{"local"}, Timeouts: domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(2 * time.Hour)},
		Quota: domain.Quota{MaxLeases: 2}, Exec: &off}); err != nil {
		t.Fatal(err)
	}
	cred := e.credential(t, apitest.AliceToken, "local")
	reg := e.registerTunnels(t, cred, tunnelURL)
	node := reg.Node.ID
	id := e.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
	path := "/v1/environments/" + id + "/files"

	if r := e.Do("POST", path, apitest.BobToken, map[string]any{"write": true}); r.Status != 409 || !strings.Contains(r.Map(t)["error"].(string), "once it is ready") {
		t.Fatalf("pending: %d %s", r.Status, r.Body)
	}
	if c, r := e.claim(t, cred, node, "1s"); c == nil || c.Environment.ID != id {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	if r := e.report(cred, node, id, map[string]any{"state": "ready", "exports": []map[string]string{{"service": "web", "target": "127.0.0.1:8080"}}}); r.Status != 200 {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}
	events := func() []domain.Event {
		page, err := e.Store.ListEvents(context.Background(), "acme", domain.EventQuery{Type: domain.EventEnvFiles, Limit: 10}, e.Clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return page.Events
	}
	key, _ := base64.RawURLEncoding.DecodeString(reg.TunnelKey)
	for _, tc := range []struct {
		body       map[string]any
		write      bool
		path       string
		eventsThen int
	}{
		{map[string]any{}, false, "/", 0},
		{map[string]any{"write": true, "path": "/workspace/src/"}, true, "/workspace/src", 1},
		{map[string]any{"write": false, "path": "logs"}, false, "logs", 1},
	} {
		r := e.Do("POST", path, apitest.BobToken, tc.body)
		if r.Status != 200 || r.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%v: %d %s", tc.body, r.Status, r.Body)
		}
		var f environments.Files
		r.JSON(t, &f)
		c, err := ticket.Verify(key, f.Ticket, e.Clock.Now())
		if err != nil {
			t.Fatalf("the node cannot check its ticket: %v", err)
		}
		if f.URL != "http://127.0.0.1:7443/files" || c.Open != ticket.OpenFiles || c.Env != id || c.Node != node || c.Org != "acme" ||
			c.Write != tc.write || c.Path != tc.path || f.Path != tc.path || f.Write != tc.write || len(c.Targets) != 0 ||
			f.Expires.Sub(e.Clock.Now()) > environments.FilesTicketTTL {
			t.Fatalf("%v: ticket %+v says %+v", tc.body, f, c)
		}
		if n := len(events()); n != tc.eventsThen {
			t.Fatalf("%v: %d environment.files events, want %d", tc.body, n, tc.eventsThen)
		}
	}
	if ev := events()[0]; ev.Subject.ID != id || ev.Actor.ID != "bob" || ev.Data["path"] != "/workspace/src" || ev.Data["write"] != true || ev.Data["node"] != node {
		t.Fatalf("event %+v", ev)
	}

	for _, tc := range []struct {
		name, token string
		body        any
		status      int
		code        string
	}{
		{"another organization", apitest.CarolToken, map[string]any{}, 404, "not_found"},
		{"a node credential", cred, map[string]any{}, 403, "forbidden"},
		{"a path with ..", apitest.BobToken, map[string]any{"path": "/workspace/../etc"}, 422, "invalid"},
		{"a NUL byte", apitest.BobToken, map[string]any{"path": "a\x00b"}, 422, "invalid"},
		{"an unknown field", apitest.BobToken, map[string]any{"user": "root"}, 400, "bad_request"},
	} {
		if r := e.Do("POST", path, tc.token, tc.body); r.Status != tc.status || r.Code() != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, r.Status, r.Body, tc.status, tc.code)
		}
	}

	// A template that turns exec off turns files off too.
	locked := e.lease(t, apitest.BobToken, map[string]any{"template": "locked"})
	if c, r := e.claim(t, cred, node, "1s"); c == nil || c.Environment.ID != locked {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	if r := e.report(cred, node, locked, map[string]any{"state": "ready"}); r.Status != 200 {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", "/v1/environments/"+locked+"/files", apitest.BobToken, map[string]any{}); r.Status != 403 || r.Code() != "exec_disabled" {
		t.Fatalf("exec: false: %d %s", r.Status, r.Body)
	}
	if n := len(events()); n != 1 {
		t.Fatalf("refused tickets left events: %d", n)
	}
}
