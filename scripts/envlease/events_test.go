package main

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// envlease events shows what happened, with the reason a stopped
// environment stopped, and --follow prints what happens while it runs.
func TestEvents(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.BobToken)

	var leased client.Leased
	u.json(&leased, "lease", "--template", "shell", "--name", "ev-1")
	id := leased.Environment.ID
	u.ok("rm", id)

	// The node finishes the teardown: stopping, then stopped.
	var out string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		out = u.ok("events", "--type", "environment.")
		if strings.Contains(out, "environment.stopped") || time.Now().After(deadline) {
			break
		}
	}
	contains(t, "events", out, "TIME", "TYPE", "environment.leased", "environment.stopped", "environment/"+id, "reason=deleted", "user:bob")
	if strings.Index(out, "environment.leased") > strings.LastIndex(out, "environment.stopped") {
		t.Fatalf("not oldest first:\n%s", out)
	}
	lines := jsonLines(t, u.ok("events", "--subject", "environment/"+id, "-o", "json"))
	if len(lines) < 2 || lines[0].Type != domain.EventEnvLeased || lines[len(lines)-1].Type != domain.EventEnvStopped ||
		lines[len(lines)-1].Data["reason"] != domain.StopDeleted {
		t.Fatalf("events of %s: %+v", id, lines)
	}
	if r := u.fails(1, "", "events", "--type", "nonsense"); !strings.Contains(r.stderr, "type") {
		t.Fatalf("bad type: %s", r.stderr)
	}

	// --follow: an environment deleted while it runs shows up. The delete
	// comes once the follow has printed what was there before (the first
	// stop), and the follow is read until it prints the second: how long
	// the node takes to stop it is the machine's, so --timeout only ends a
	// follow that hangs.
	var second client.Leased
	u.json(&second, "lease", "--template", "shell", "--name", "ev-2")
	follow := u.start("events", "--follow", "--poll", "100ms", "--timeout", "2m", "--type", "environment.stopped", "-o", "json")
	sc := bufio.NewScanner(follow.stdout)
	var printed []string
	next := func() domain.Event {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("follow ended (%v) after printing:\n%s\n%s", sc.Err(), strings.Join(printed, "\n"), follow.stderr.String())
		}
		printed = append(printed, sc.Text())
		var e domain.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		return e
	}
	if e := next(); e.Subject.ID != id || e.Type != domain.EventEnvStopped {
		t.Fatalf("follow printed first %+v, want the stop of %s", e, id)
	}
	u.ok("rm", second.Environment.ID)
	for {
		if e := next(); e.Subject.ID == second.Environment.ID && e.Type == domain.EventEnvStopped {
			break
		}
	}
	follow.interrupt(t)
}

func jsonLines(t *testing.T, s string) []domain.Event {
	t.Helper()
	var out []domain.Event
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var e domain.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		out = append(out, e)
	}
	return out
}

// envlease webhooks: an admin creates one (the secret alone on standard
// output), lists it, sees its deliveries and deletes it; a member may not.
func TestWebhooksCommands(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.AliceToken)
	secret := strings.TrimSpace(u.ok("webhooks", "create", "https://93.184.216.34/envlease", "--type", "environment.", "--type", "quota.refused"))
	if !strings.HasPrefix(secret, "whsec_") || strings.Contains(secret, "\n") {
		t.Fatalf("create printed %q", secret)
	}
	var list struct {
		Webhooks []domain.Webhook `json:"webhooks"`
	}
	u.json(&list, "webhooks", "ls")
	if len(list.Webhooks) != 1 || list.Webhooks[0].URL != "https://93.184.216.34/envlease" || list.Webhooks[0].State != "enabled" {
		t.Fatalf("ls: %+v", list)
	}
	id := list.Webhooks[0].ID
	contains(t, "ls", u.ok("webhooks", "ls"), "ID", "URL", id, "environment.,quota.refused", "enabled")
	contains(t, "deliveries", u.ok("webhooks", "deliveries", id), "ID", "STATE", "NEXT TRY")
	if r := u.fails(1, "", "webhooks", "create", "https://10.0.0.1/x", "--type", "*"); !strings.Contains(r.stderr, "private") {
		t.Fatalf("a private address: %s", r.stderr)
	}
	u.fails(2, "", "webhooks", "create", "https://93.184.216.34/x")
	u.ok("webhooks", "rm", id)
	u.fails(4, "", "webhooks", "rm", id)

	bob := newUser(t, s)
	bob.login(clienttest.BobToken)
	bob.fails(3, "", "webhooks", "ls")
}
