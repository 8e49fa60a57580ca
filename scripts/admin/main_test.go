package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/fixture"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/store"
)

// The admin tool reaches the table only through the SDK's own endpoint
// settings, exactly as it would reach LocalStack.
func TestApplyAndBootstrapThroughEndpointSettings(t *testing.T) {
	d := useTestTable(t)
	ctx := context.Background()

	var out bytes.Buffer
	if err := run(ctx, []string{"apply", filepath.Join("..", "devserver", "demo.json")}, &out); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if !strings.Contains(out.String(), "applied org acme") {
		t.Fatalf("apply said %q", out.String())
	}
	st := store.New(d.Client(ctx), d.Table)
	if ts, err := st.ListTemplates(ctx, "acme"); err != nil || len(ts) == 0 {
		t.Fatalf("templates after apply: %v %v", ts, err)
	}
	// apply never stores the file's plain tokens.
	if ks, err := st.ListKeys(ctx, "acme"); err != nil || len(ks) != 0 {
		t.Fatalf("keys after apply: %d %v", len(ks), err)
	}

	out.Reset()
	if err := run(ctx, []string{"bootstrap", "--org", "initech", "--user", "peter"}, &out); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	token := lines[len(lines)-1]
	if !strings.HasPrefix(token, "els_cli_") {
		t.Fatalf("bootstrap output %q", out.String())
	}
	// The printed token is an admin token of the new organization.
	e := keysEnv(t, d, st)
	if r := e.Do(http.MethodPost, "/v1/keys", token, map[string]string{"name": "ci"}); r.Status != http.StatusCreated {
		t.Fatalf("bootstrapped token creating a key: %d %s", r.Status, r.Body)
	}
}

// useTestTable points the admin tool at a fresh test table through the SDK's
// own endpoint settings.
func useTestTable(t *testing.T) *devstack.Dynamo {
	t.Helper()
	d := devstack.NewTestDynamo(t)
	t.Setenv("TABLE_NAME", d.Table)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", d.Endpoint)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", d.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "local")
	return d
}

// keysEnv serves the keys group over st, to see what a token can do.
func keysEnv(t *testing.T, d *devstack.Dynamo, st *store.Store) *apitest.Env {
	e := &apitest.Env{T: t, Dynamo: d, Store: st, Clock: apitest.NewClockNow(), RemoteAddr: "192.0.2.9:1"}
	e.Log = apitest.DiscardLogger()
	svc := keys.NewService(st, e.Clock)
	e.Handler = httpapi.New(httpapi.Config{Logger: e.Log, Auth: apitest.NewAuth(e)}, keys.KeyRoutes(svc))
	return e
}

// bootstrap holds ids to the rule apply holds them to, and writes nothing
// when one breaks it.
func TestBootstrapRefusesIDsApplyRefuses(t *testing.T) {
	d := useTestTable(t)
	ctx := context.Background()
	st := store.New(d.Client(ctx), d.Table)
	cases := []struct {
		org, user string
	}{
		{"ac/me", "alice"},
		{"ac#me", "alice"},
		{"Acme", "alice"},
		{"acme-", "alice"},
		{"acme", "al#ice"},
		{"acme", "al/ice"},
		{"acme", "Alice"},
		{"acme", strings.Repeat("a", 64)},
	}
	for _, c := range cases {
		err := run(ctx, []string{"bootstrap", "--org", c.org, "--user", c.user}, &bytes.Buffer{})
		if err == nil {
			t.Errorf("bootstrap --org %q --user %q: accepted", c.org, c.user)
			continue
		}
		// apply refuses the same ids, with the same rule.
		file := fmt.Sprintf(`{"orgs":[{"id":%q,"users":[{"id":%q,"role":"admin"}]}]}`, c.org, c.user)
		if _, perr := fixture.Parse([]byte(file)); perr == nil || !strings.Contains(perr.Error(), err.Error()) {
			t.Errorf("bootstrap said %q; apply said %v", err, perr)
		}
		if _, err := st.GetOrg(ctx, c.org); domain.ErrorCode(err) != domain.CodeNotFound {
			t.Errorf("bootstrap --org %q --user %q wrote the organization: %v", c.org, c.user, err)
		}
	}
	if ks, err := st.ListKeys(ctx, "acme"); err != nil || len(ks) != 0 {
		t.Fatalf("keys after refused bootstraps: %d %v", len(ks), err)
	}
	if err := run(ctx, []string{"bootstrap", "--org", "acme-2", "--user", "alice"}, &bytes.Buffer{}); err != nil {
		t.Fatalf("a valid bootstrap: %v", err)
	}
}

// Without --prune, apply lists what the file no longer has and removes
// nothing; with it, the person's tokens stop working and the template goes.
func TestApplyPrune(t *testing.T) {
	d := useTestTable(t)
	ctx := context.Background()
	st := store.New(d.Client(ctx), d.Table)
	demo := filepath.Join("..", "devserver", "demo.json")
	if err := run(ctx, []string{"apply", demo}, &bytes.Buffer{}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	clk := apitest.NewClockNow()
	svc := keys.NewService(st, clk)
	var bobs []string
	for _, name := range []string{"laptop", "desktop"} {
		issued, err := svc.CreateToken(ctx, domain.Principal{OrgID: "acme", UserID: "bob", Role: domain.RoleMember}, name, "cli")
		if err != nil {
			t.Fatal(err)
		}
		bobs = append(bobs, issued.Token)
	}
	f, err := fixture.Load(demo)
	if err != nil {
		t.Fatal(err)
	}
	acme := &f.Orgs[0]
	var users []fixture.User
	for _, u := range acme.Users {
		if u.ID != "bob" {
			users = append(users, u)
		}
	}
	var tpls []domain.Template
	for _, tpl := range acme.Templates {
		if tpl.Name != "warmweb" {
			tpls = append(tpls, tpl)
		}
	}
	if acme.ID != "acme" || len(users) != len(acme.Users)-1 || len(tpls) != len(acme.Templates)-1 {
		t.Fatalf("demo configuration changed: %+v", acme)
	}
	acme.Users, acme.Templates = users, tpls
	raw, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	smaller := filepath.Join(t.TempDir(), "orgs.json")
	if err := os.WriteFile(smaller, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	e := keysEnv(t, d, st)

	var out bytes.Buffer
	if err := run(ctx, []string{"apply", smaller}, &out); err != nil {
		t.Fatalf("apply: %v", err)
	}
	for _, line := range []string{"org acme: would remove user bob (2 tokens)\n", "org acme: would remove template warmweb\n", "nothing was removed"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("apply said %q, without %q", out.String(), line)
		}
	}
	if strings.Contains(out.String(), "org globex: would") || strings.Contains(out.String(), "user alice") {
		t.Errorf("apply listed what the file still has: %q", out.String())
	}
	for _, tok := range bobs {
		if r := e.Do(http.MethodGet, "/v1/keys", tok, nil); r.Status != http.StatusOK {
			t.Fatalf("bob's token after apply without --prune: %d %s", r.Status, r.Body)
		}
	}
	if _, err := st.GetTemplate(ctx, "acme", "warmweb"); err != nil {
		t.Fatalf("template after apply without --prune: %v", err)
	}

	// Flags come before the file, as everywhere in the tool.
	if err := run(ctx, []string{"apply", smaller, "--prune"}, &bytes.Buffer{}); err == nil {
		t.Fatal("apply FILE --prune: accepted")
	}
	out.Reset()
	if err := run(ctx, []string{"apply", "--prune", smaller}, &out); err != nil {
		t.Fatalf("apply --prune: %v", err)
	}
	for _, line := range []string{"org acme: removed user bob (2 tokens revoked)\n", "org acme: removed template warmweb\n"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("apply --prune said %q, without %q", out.String(), line)
		}
	}
	for _, tok := range bobs {
		if r := e.Do(http.MethodGet, "/v1/keys", tok, nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("bob's token after the prune: %d %s", r.Status, r.Body)
		}
	}
	if _, err := st.GetUser(ctx, "acme", "bob"); domain.ErrorCode(err) != domain.CodeNotFound {
		t.Fatalf("bob's record after the prune: %v", err)
	}
	if _, err := st.GetTemplate(ctx, "acme", "warmweb"); domain.ErrorCode(err) != domain.CodeNotFound {
		t.Fatalf("template after the prune: %v", err)
	}
	out.Reset()
	if err := run(ctx, []string{"apply", "--prune", smaller}, &out); err != nil || strings.Contains(out.String(), "remove") {
		t.Fatalf("pruning again: %v %q", err, out.String())
	}
}

func TestUsageErrors(t *testing.T) {
	t.Setenv("TABLE_NAME", "x")
	for _, args := range [][]string{{}, {"nope"}, {"apply"}, {"apply", "--prune"}, {"apply", "a.json", "b.json"}, {"apply", "--nope", "a.json"}, {"bootstrap", "--org", "a"}} {
		if err := run(context.Background(), args, &bytes.Buffer{}); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
