package main

import (
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

func TestLeaseGetTouchRemove(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.BobToken)

	// This machine as a sandbox, remembered in the profile.
	var sb domain.Sandbox
	u.json(&sb, "sandbox", "register", "--name", "laptop")
	if sb.ID == "" || sb.Name != "laptop" || sb.Joined == nil {
		t.Fatalf("sandbox %+v", sb)
	}
	r := u.run("", "sandbox", "register")
	if r.code != 0 || !strings.Contains(r.stderr, "already registered as "+sb.ID) {
		t.Fatalf("second register: %d %s", r.code, r.stderr)
	}
	contains(t, "whoami", u.ok("whoami"), "SANDBOX", sb.ID+" (laptop)")

	var leased client.Leased
	u.json(&leased, "lease", "--template", "shell", "--label", "team=web", "--label", "pr=42", "--idle", "15m", "--name", "review-42", "--wait")
	env := leased.Environment
	if env.State != domain.StateReady || env.Name != "review-42" || env.Labels["team"] != "web" || env.Labels["pr"] != "42" ||
		env.Idle.String() != "15m" || env.Sandbox != sb.ID || leased.Config.Sandbox != sb.ID {
		t.Fatalf("leased %+v", leased)
	}
	if len(env.Exports) != 1 || env.Exports[0].Listen == "" || env.Exports[0].Target == "" {
		t.Fatalf("exports %+v", env.Exports)
	}

	// ls -o json parses, and the table shows the environment.
	var list struct {
		Environments []domain.Environment `json:"environments"`
	}
	u.json(&list, "ls")
	if len(list.Environments) != 1 || list.Environments[0].ID != env.ID {
		t.Fatalf("ls: %+v", list)
	}
	out := u.ok("ls")
	contains(t, "ls", out, "ID", "STATE", env.ID, "review-42", "ready", env.Exports[0].Listen+"->"+env.Exports[0].Target)

	var got domain.Environment
	u.json(&got, "get", env.ID)
	if got.ID != env.ID || got.State != domain.StateReady {
		t.Fatalf("get: %+v", got)
	}
	contains(t, "get", u.ok("get", env.ID), "STATE", "ready", "LABELS", "pr=42,team=web", "TIMEOUTS", "idle 15m, hard 6h")

	var touched domain.Environment
	u.json(&touched, "touch", env.ID)
	if touched.ID != env.ID || touched.IdleUntil.Before(env.IdleUntil) {
		t.Fatalf("touch moved idleUntil from %v to %v", env.IdleUntil, touched.IdleUntil)
	}
	contains(t, "touch", u.ok("touch", env.ID), "IDLE UNTIL", env.ID)

	contains(t, "rm", u.ok("rm", env.ID), env.ID, "stopping")
	u.json(&got, "get", env.ID)
	if got.State.Live() || got.StopReason != "deleted" {
		t.Fatalf("after rm: %s (%s)", got.State, got.StopReason)
	}
	// Deleting again changes nothing; touching what ended is gone (4).
	u.ok("rm", env.ID)
	u.fails(exitNotFound, "", "touch", env.ID)

	u.json(&list, "ls")
	if len(list.Environments) != 0 {
		t.Fatalf("ls after rm: %+v", list)
	}
	u.json(&list, "ls", "--all")
	if len(list.Environments) != 1 || list.Environments[0].ID != env.ID {
		t.Fatalf("ls --all after rm: %+v", list)
	}

	// A lease without --wait answers at once, pending or later.
	u.json(&leased, "lease", "--template", "sleeper", "--no-sandbox")
	if !leased.Environment.State.Live() || leased.Environment.Sandbox != "" {
		t.Fatalf("lease: %+v", leased.Environment)
	}
	contains(t, "ls", u.ok("ls"), leased.Environment.ID)
	u.ok("rm", leased.Environment.ID)
}

func TestOrganizationListings(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.AliceToken)

	var templates client.TemplateList
	u.json(&templates, "templates")
	names := map[string]bool{}
	for _, tp := range templates.Templates {
		names[tp.Name] = true
	}
	if !names["shell"] || !names["sleeper"] || len(templates.Pools) == 0 {
		t.Fatalf("templates: %+v", templates)
	}
	contains(t, "templates", u.ok("templates"), "NAME", "shell", "sleeper", "web:8080", "SHARES", "src=/workspace", "30m", "6h")

	u.ok("lease", "-t", "sleeper")
	var quotas struct {
		Quotas []domain.QuotaEntry `json:"quotas"`
	}
	u.json(&quotas, "quotas")
	for _, q := range quotas.Quotas {
		if q.Template == "sleeper" && (q.Running != 1 || q.MaxLeases != 3) {
			t.Fatalf("quota %+v", q)
		}
	}
	contains(t, "quotas", u.ok("quotas"), "TEMPLATE", "RUNNING", "sleeper")

	var report client.UsageReport
	u.json(&report, "usage", "--since", "1d")
	if report.Since.IsZero() {
		t.Fatalf("usage: %+v", report)
	}
	// The live environment is counted up to now; once it has run a second
	// the report has a row for it and a bar.
	if len(report.Usage) > 0 {
		out := u.ok("usage")
		contains(t, "usage", out, "DAY", "TEMPLATE", "sleeper", "█")
	}
	u.fails(exitUsage, "", "usage", "--since", "yesterday")

	// Keys: create (the token alone on standard output), list, revoke.
	token := strings.TrimSpace(u.ok("keys", "create", "ci"))
	if !strings.HasPrefix(token, "els_org_") {
		t.Fatalf("keys create printed %q", token)
	}
	var keys struct {
		Keys []domain.APIKey `json:"keys"`
	}
	u.json(&keys, "keys", "ls")
	var id string
	for _, k := range keys.Keys {
		if k.Name == "ci" {
			id = k.ID
		}
	}
	if id == "" {
		t.Fatalf("keys ls lacks ci: %+v", keys)
	}
	contains(t, "keys revoke", u.ok("keys", "revoke", id), id, "ci")
	ci := newUser(t, s)
	ci.env = []string{"ENVLEASE_URL=" + s.URL, "ENVLEASE_TOKEN=" + token}
	ci.fails(exitAuth, "", "templates")
}

func TestHelpCompletionAndExitCodesTopic(t *testing.T) {
	u := &user{t: t, home: t.TempDir()}
	contains(t, "help exit-codes", u.ok("help", "exit-codes"), "0  success", "2  usage", "3  authentication", "4  not found", "5  quota", "6  timeout")
	contains(t, "help", u.ok("--help"), "exit-codes", "lease", "artifacts", "completion")
	for shell, want := range map[string]string{"bash": "complete -o default", "zsh": "#compdef envlease", "fish": "complete -c envlease"} {
		contains(t, "completion "+shell, u.ok("completion", shell), want)
	}
	u.fails(exitUsage, "", "frobnicate")
	u.fails(exitUsage, "", "ls", "--frob")
	u.fails(exitUsage, "", "get")
	u.fails(exitUsage, "", "lease")
	u.fails(exitUsage, "", "whoami", "-o", "yaml")
}
