package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/fixture"
	"github.com/envlease/envlease/shared/identity"
)

// An environment whose template asks for an identity reads its tokens
// from inside, at the files its variables name; they verify with go-oidc
// against the dev server's own discovery document, and say who it is. The
// process runtime here; TestIdentityTokenInsideAContainer for runc.
func TestIdentityTokenInsideAnEnvironment(t *testing.T) {
	base := startDevserverWith(t, func(o *options) {
		o.edit = func(f *fixture.File) {
			f.Orgs[0].Templates = append(f.Orgs[0].Templates, domain.Template{
				Name: "idweb", Runtime: domain.RuntimeProcess, Pools: []string{"local"},
				// What the command itself read at the files its variables
				// name, served on its export.
				Command:  []string{"sh", "-c", readTokens + ` && exec python3 -m http.server "$PORT" --bind 127.0.0.1`},
				Exports:  map[string]domain.Export{"web": {Port: 8080}},
				Timeouts: domain.Timeouts{Idle: domain.Duration(10 * time.Minute), Hard: domain.Duration(time.Hour)},
				Quota:    domain.Quota{MaxLeases: 1},
				Identity: testIdentity,
			})
		}
	})
	checkIdentityInside(t, base, "idweb", "")
}

// The same inside a container (runc, read-only root, busybox): the files
// are at /run/envlease/identity.
func TestIdentityTokenInsideAContainer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("containers need the agent to run as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := devstack.RuncBinary(ctx, os.Stderr); err != nil {
		t.Fatal(err)
	}
	base := startDevserverWith(t, func(o *options) {
		o.containers = true
		o.edit = func(f *fixture.File) {
			for _, tpl := range f.Orgs[0].Templates {
				if tpl.Name == "box" {
					tpl.Name, tpl.Warm, tpl.Identity = "idbox", 0, testIdentity
					tpl.Command = []string{"sh", "-c", "mkdir -p www && cd www && " + readTokens + ` && cd .. && trap 'exit 0' TERM
httpd -f -p "$PORT" -h www &
wait`}
					f.Orgs[0].Templates = append(f.Orgs[0].Templates, tpl)
					return
				}
			}
			t.Error("the demo has no box template")
		}
	})
	checkIdentityInside(t, base, "idbox", "/run/envlease/identity/")
}

// readTokens copies, inside the environment, the tokens its variables name
// and lists its identity folder, into the working folder.
const readTokens = `cat "$AWS_WEB_IDENTITY_TOKEN_FILE" > aws.token && cat "$ENVLEASE_IDENTITY_TOKEN_FILE" > first.token && ` +
	`ls "$ENVLEASE_IDENTITY_DIR" > dir.txt && echo "$AWS_WEB_IDENTITY_TOKEN_FILE" > path.txt`

var testIdentity = &domain.TemplateIdentity{Audiences: []string{"vault", domain.AWSAudience}, Lifetime: domain.Duration(15 * time.Minute)}

// checkIdentityInside leases template and checks what its environment
// read; pathPrefix is where AWS_WEB_IDENTITY_TOKEN_FILE must point ("" for
// anywhere: a process's folder is the node's).
func checkIdentityInside(t *testing.T, base, template, pathPrefix string) {
	t.Helper()
	c := api{t: t, base: base, token: apitest.BobToken}
	var leased envAnswer
	if s := c.do("POST", "/v1/environments", map[string]any{"template": template, "project": "payments", "labels": map[string]string{"team": "pay"}}, &leased); s != 201 {
		t.Fatalf("lease: %d", s)
	}
	id := leased.Environment.ID
	defer c.do("DELETE", "/v1/environments/"+id, nil, nil)
	e := c.waitState(id, domain.StateReady, 2*time.Minute)
	get := func(path string) string {
		t.Helper()
		status, body := clienttest.GetThroughTunnel(t, base, c.token, id, e.Exports[0].Target, path)
		if status != 200 {
			t.Fatalf("GET %s through the export: %d %s", path, status, body)
		}
		return body
	}
	if dir := get("/dir.txt"); dir != "sts.amazonaws.com\nvault\n" {
		t.Errorf("the identity folder holds %q, want a folder per audience", dir)
	}
	if p := strings.TrimSpace(get("/path.txt")); !strings.HasSuffix(p, "/run/envlease/identity/sts.amazonaws.com/token") || !strings.HasPrefix(p, pathPrefix) {
		t.Errorf("AWS_WEB_IDENTITY_TOKEN_FILE is %q", p)
	}
	ctx := context.Background()
	p, err := oidc.NewProvider(ctx, base)
	if err != nil {
		t.Fatalf("the dev server's discovery document: %v", err)
	}
	for _, c := range []struct{ file, aud string }{{"/aws.token", domain.AWSAudience}, {"/first.token", "vault"}} {
		tok, err := p.Verifier(&oidc.Config{ClientID: c.aud}).Verify(ctx, get(c.file))
		if err != nil {
			t.Fatalf("the token the environment read at %s: %v", c.file, err)
		}
		var claims identity.Claims
		if err := tok.Claims(&claims); err != nil {
			t.Fatal(err)
		}
		if claims.Issuer != base || claims.Subject != "org:acme:template:"+template+":project:payments" || claims.Environment != id ||
			claims.LeasedBy != "bob" || claims.Labels["team"] != "pay" || claims.Expiry.Time().Sub(claims.IssuedAt.Time()) != 15*time.Minute {
			t.Errorf("claims of %s: %+v", c.file, claims)
		}
	}
	// Another audience's verifier refuses it.
	if _, err := p.Verifier(&oidc.Config{ClientID: "sts.amazonaws.com"}).Verify(ctx, get("/first.token")); err == nil {
		t.Error("the vault token verified for sts.amazonaws.com")
	}
	// What the API shows of it: the claims, never a token.
	var view identity.View
	if s := c.do("GET", "/v1/environments/"+id+"/identity", nil, &view); s != 200 || len(view.Tokens) != 2 ||
		view.Tokens[1].Path != "/run/envlease/identity/sts.amazonaws.com/token" || view.Tokens[1].Claims.Environment != id {
		t.Errorf("identity view: %d %+v", s, view)
	}
	if raw, _ := json.Marshal(view); strings.Contains(string(raw), "eyJ") {
		t.Errorf("the identity view carries a token: %s", raw)
	}
}
