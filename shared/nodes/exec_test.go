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

// An exec ticket is given for a ready environment only, signed with its
// node's key, opening "exec" for the one command asked for (its digest,
// never its words), and only once the environment.exec event, which names
// the program and never its arguments, is written. Another organization
// gets 404, an environment not ready 409, a template with exec: false 403
// exec_disabled, a malformed command 422.
func TestExecTicket(t *testing.T) {
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
	path := "/v1/environments/" + id + "/exec"
	cmd := []string{"sh", "-c", "echo s3cr3t-token"}
	body := map[string]any{"command": cmd}

	if r := e.Do("POST", path, apitest.BobToken, body); r.Status != 409 || !strings.Contains(r.Map(t)["error"].(string), "once it is ready") {
		t.Fatalf("pending: %d %s", r.Status, r.Body)
	}
	if c, r := e.claim(t, cred, node, "1s"); c == nil || c.Environment.ID != id {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	if r := e.report(cred, node, id, map[string]any{"state": "ready", "exports": []map[string]string{{"service": "web", "target": "127.0.0.1:8080"}}}); r.Status != 200 {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}

	r := e.Do("POST", path, apitest.BobToken, body)
	if r.Status != 200 || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("exec: %d %v %s", r.Status, r.Header, r.Body)
	}
	var x environments.Exec
	r.JSON(t, &x)
	key, _ := base64.RawURLEncoding.DecodeString(reg.TunnelKey)
	c, err := ticket.Verify(key, x.Ticket, e.Clock.Now())
	if err != nil {
		t.Fatalf("the node cannot check its ticket: %v", err)
	}
	if x.URL != tunnelURL || c.Org != "acme" || c.Env != id || c.Node != node || c.Open != ticket.OpenExec ||
		c.Command != ticket.CommandDigest(cmd) || len(c.Targets) != 0 || !c.Expires().Equal(x.Expires) ||
		x.Expires.Sub(e.Clock.Now()) > environments.ExecTicketTTL {
		t.Fatalf("ticket %+v says %+v", x, c)
	}
	if strings.Contains(x.Ticket, "s3cr3t") {
		t.Fatal("the ticket carries the command's arguments")
	}
	page, err := e.Store.ListEvents(context.Background(), "acme", domain.EventQuery{Type: domain.EventEnvExec, Limit: 10}, e.Clock.Now())
	if err != nil || len(page.Events) != 1 {
		t.Fatalf("exec events: %v %+v", err, page)
	}
	ev := page.Events[0]
	if ev.Subject.ID != id || ev.Actor.ID != "bob" || ev.Data["command"] != "sh" || ev.Data["node"] != node {
		t.Fatalf("event %+v", ev)
	}
	for k, v := range ev.Data {
		if s, ok := v.(string); ok && (strings.Contains(s, "s3cr3t") || strings.Contains(s, "-c")) {
			t.Fatalf("the event keeps an argument in %s: %q", k, s)
		}
	}

	for _, tc := range []struct {
		name, token string
		body        any
		status      int
		code        string
	}{
		{"another organization", apitest.CarolToken, body, 404, "not_found"},
		{"a node credential", cred, body, 403, "forbidden"},
		{"no command", apitest.BobToken, map[string]any{"command": []string{}}, 422, "invalid"},
		{"an empty program", apitest.BobToken, map[string]any{"command": []string{""}}, 422, "invalid"},
		{"a NUL byte", apitest.BobToken, map[string]any{"command": []string{"sh", "a\x00b"}}, 422, "invalid"},
		{"an unknown field", apitest.BobToken, map[string]any{"command": cmd, "user": "root"}, 400, "bad_request"},
	} {
		if r := e.Do("POST", path, tc.token, tc.body); r.Status != tc.status || r.Code() != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, r.Status, r.Body, tc.status, tc.code)
		}
	}

	// A template that turns exec off refuses it, whoever asks.
	locked := e.lease(t, apitest.BobToken, map[string]any{"template": "locked"})
	if c, r := e.claim(t, cred, node, "1s"); c == nil || c.Environment.ID != locked {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	if r := e.report(cred, node, locked, map[string]any{"state": "ready"}); r.Status != 200 {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}
	for _, tok := range []string{apitest.BobToken, apitest.AliceToken} {
		if r := e.Do("POST", "/v1/environments/"+locked+"/exec", tok, body); r.Status != 403 || r.Code() != "exec_disabled" {
			t.Fatalf("exec: false: %d %s", r.Status, r.Body)
		}
	}

	if r := e.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("delete: %d", r.Status)
	}
	if r := e.Do("POST", path, apitest.BobToken, body); r.Status != 409 || !strings.Contains(r.Map(t)["error"].(string), "no longer runs") {
		t.Fatalf("stopping: %d %s", r.Status, r.Body)
	}
	page, _ = e.Store.ListEvents(context.Background(), "acme", domain.EventQuery{Type: domain.EventEnvExec, Limit: 10}, e.Clock.Now())
	if len(page.Events) != 1 {
		t.Fatalf("refused execs left events: %+v", page.Events)
	}
}
