package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
)

// Every write route a token can call either makes something that acts
// later (and is in the makers table, whose services pass it through
// auth.Inherit) or says why it does not: a new such route fails here until
// it is classified, and a maker until it has a case in
// TestMakersNeverOutliveOrOutrankTheirMaker.
func TestEveryMakerInherits(t *testing.T) {
	e := apitest.New(t, nil)
	makers, others := httpapi.MakerTable(), httpapi.NotMakerTable()
	seen := map[string]bool{}
	for _, g := range apitest.AllRoutes(e, nil) {
		for _, rt := range g {
			key := rt.Method + " " + rt.Path
			seen[key] = true
			_, maker := makers[key]
			_, other := others[key]
			write := rt.Method == http.MethodPost || rt.Method == http.MethodPut || rt.Method == http.MethodPatch
			tokenRoute := rt.Access == httpapi.Member || rt.Access == httpapi.Admin
			switch {
			case maker && other:
				t.Errorf("%s is both a maker and not one", key)
			case tokenRoute && write && !maker && !other:
				t.Errorf("%s is a write route in neither the makers table nor routeNotMakers: say whether what it makes acts later", key)
			case !(tokenRoute && write) && (maker || other):
				t.Errorf("%s is classified but is not a write route a token calls", key)
			}
		}
	}
	for key := range makers {
		if !seen[key] {
			t.Errorf("makers table names %s, which no group serves", key)
		}
		if _, ok := makerCases[key]; !ok {
			t.Errorf("maker %s has no case in makerCases", key)
		}
	}
	for key := range others {
		if !seen[key] {
			t.Errorf("routeNotMakers names %s, which no group serves", key)
		}
	}
}

// makerWorld is what the cases set up their requests in.
type makerWorld struct {
	*apitest.Env
	t *testing.T
	// ready is the environment readyEnvironment made, which every case
	// shares: the shell template's quota allows two at once.
	ready string
}

// makerCase drives one maker route: request builds its path and body (with
// alice's full token for what it needs first), expires reads the expiry of
// what was made from the answer. The wanted statuses are of a token that
// holds every scope and expires, one that is restricted to the shell
// template and expires, and one that holds only the admin scope (0: the
// route itself refuses it for its scope, which TestEveryRouteHasAScope
// covers).
type makerCase struct {
	request                        func(w *makerWorld) (path string, body any)
	expires                        func(m map[string]any) any
	scoped, restricted, adminScope int
}

func field(path ...string) func(m map[string]any) any {
	return func(m map[string]any) any {
		var v any = m
		for _, p := range path {
			o, _ := v.(map[string]any)
			v = o[p]
		}
		return v
	}
}

func fixed(path string, body any) func(*makerWorld) (string, any) {
	return func(*makerWorld) (string, any) { return path, body }
}

var makerCases = map[string]makerCase{
	"POST /v1/tokens": {
		request: fixed("/v1/tokens", map[string]any{"name": "made"}),
		expires: field("apiKey", "expires"), scoped: 201, restricted: 201,
	},
	"POST /v1/keys": {
		request: fixed("/v1/keys", map[string]any{"name": "made", "scopes": []string{"environments:read"}}),
		expires: field("apiKey", "expires"), scoped: 201, restricted: 201,
	},
	"POST /v1/console/codes": {
		// The console token a code buys has every right and its own
		// lifetime: an expiring or limited token asks for none.
		request: fixed("/v1/console/codes", nil), scoped: 403, restricted: 403,
	},
	"POST /v1/issuers": {
		request: fixed("/v1/issuers", map[string]any{"name": "ci", "url": "https://93.184.216.34", "audience": "envlease",
			"conditions": map[string]string{"repository": "acme/app"}, "scopes": []string{"environments:lease"}}),
		expires: field("issuer", "expires"), scoped: 201, restricted: 201, adminScope: 403,
	},
	"POST /v1/nodes/credentials": {
		request: fixed("/v1/nodes/credentials", map[string]any{"pool": "local", "name": "rack"}),
		expires: field("apiKey", "expires"), scoped: 201, restricted: 403, adminScope: 403,
	},
	"POST /v1/webhooks": {
		request: fixed("/v1/webhooks", map[string]any{"url": "https://93.184.216.34/hook", "types": []string{"*"}}),
		expires: field("webhook", "expires"), scoped: 201, restricted: 403, adminScope: 403,
	},
	"POST /v1/artifacts/{id}/links": {
		request: func(w *makerWorld) (string, any) {
			return "/v1/artifacts/" + w.sealedArtifact() + "/links", map[string]any{"expires": "24h"}
		},
		expires: field("expires"), scoped: 200, restricted: 200,
	},
	"POST /v1/environments/{id}/tunnel": {
		request: func(w *makerWorld) (string, any) { return "/v1/environments/" + w.readyEnvironment() + "/tunnel", nil },
		expires: field("expires"), scoped: 200, restricted: 200,
	},
	"POST /v1/environments/{id}/previews": {
		// A preview link opens an export to whoever holds it: it asks for
		// a day, and gets no more than its maker has left.
		request: func(w *makerWorld) (string, any) {
			return "/v1/environments/" + w.readyEnvironment() + "/previews", map[string]any{"expires": "24h"}
		},
		expires: field("expires"), scoped: 201, restricted: 201,
	},
	"POST /v1/environments/{id}/files": {
		request: func(w *makerWorld) (string, any) {
			return "/v1/environments/" + w.readyEnvironment() + "/files", map[string]any{"write": true}
		},
		expires: field("expires"), scoped: 200, restricted: 200,
	},
}

// A scoped or restricted token that expires makes nothing that outlives
// it, nothing wider than itself, and is refused (403, saying why) what it
// cannot pass on.
func TestMakersNeverOutliveOrOutrankTheirMaker(t *testing.T) {
	s3 := devstack.NewTestS3(t)
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		// S3 compares presigned requests with real time.
		e.Clock.Set(time.Now().UTC().Truncate(time.Second))
		return apitest.AllRoutes(e, blob.New(blob.Options{Client: s3.Client(context.Background()), Bucket: s3.Bucket, Clock: e.Clock}))
	})
	w := &makerWorld{Env: e, t: t}
	tokenExpiry := e.Clock.Now().Add(2 * time.Minute)
	tokens := map[string]string{
		"scoped":     w.token(map[string]any{"scopes": domain.AllScopes, "expiresIn": "2m"}),
		"restricted": w.token(map[string]any{"restrictions": map[string]any{"templates": []string{"shell"}}, "expiresIn": "2m"}),
		"adminScope": w.token(map[string]any{"scopes": []string{"admin"}, "expiresIn": "2m"}),
	}
	for route, c := range makerCases {
		for _, kind := range []string{"scoped", "restricted", "adminScope"} {
			want := map[string]int{"scoped": c.scoped, "restricted": c.restricted, "adminScope": c.adminScope}[kind]
			if want == 0 {
				continue
			}
			t.Run(route+"/"+kind, func(t *testing.T) {
				w.t = t
				path, body := c.request(w)
				method, _, _ := strings.Cut(route, " ")
				r := e.Do(method, path, tokens[kind], body)
				if r.Status != want {
					t.Fatalf("%s with a %s token: %d %s, want %d", route, kind, r.Status, r.Body, want)
				}
				if want == http.StatusForbidden {
					// The refusal says why, for the token's holder to act on.
					msg, _ := r.Map(t)["error"].(string)
					if !strings.Contains(msg, "token") || (r.Code() != "restricted" && r.Code() != "insufficient_scope" && r.Code() != "forbidden") {
						t.Fatalf("refusal does not say why: %s", r.Body)
					}
					return
				}
				got, _ := c.expires(r.Map(t)).(string)
				at, err := time.Parse(time.RFC3339Nano, got)
				if err != nil || at.After(tokenExpiry) {
					t.Fatalf("%s made by a token that expires at %s expires at %q: %s", route, tokenExpiry, got, r.Body)
				}
			})
		}
	}
	// What was made inherits the restrictions too, and stops with its
	// maker: a node credential of an expiring token.
	w.t = t
	r := e.Do(http.MethodPost, "/v1/nodes/credentials", tokens["scoped"], map[string]any{"pool": "local", "name": "late"})
	cred, _ := r.Map(t)["token"].(string)
	k := e.Do(http.MethodPost, "/v1/keys", tokens["restricted"], map[string]any{"name": "narrow"})
	if rs := field("apiKey", "restrictions", "templates")(k.Map(t)); rs == nil {
		t.Fatalf("a restricted token's key carries no restrictions: %s", k.Body)
	}
	e.Clock.Advance(2 * time.Minute)
	if r := e.Do(http.MethodPost, "/v1/nodes", cred, map[string]any{"name": "n", "address": "127.0.0.1", "capacity": 1}); r.Status != http.StatusUnauthorized {
		t.Fatalf("a node credential outlived its maker: %d %s", r.Status, r.Body)
	}
}

// token mints a CLI token of alice's with the given grant.
func (w *makerWorld) token(grant map[string]any) string {
	w.t.Helper()
	grant["name"] = "maker"
	r := w.Do(http.MethodPost, "/v1/tokens", apitest.AliceToken, grant)
	if r.Status != http.StatusCreated {
		w.t.Fatalf("token: %d %s", r.Status, r.Body)
	}
	tok, _ := r.Map(w.t)["token"].(string)
	return tok
}

// sealedArtifact uploads and seals a small artifact with alice's token.
func (w *makerWorld) sealedArtifact() string {
	t := w.t
	t.Helper()
	data := []byte("made by a token")
	sum := sha256.Sum256(data)
	r := w.Do(http.MethodPost, "/v1/artifacts", apitest.AliceToken, map[string]any{
		"name": "out.txt", "contentType": "text/plain", "size": len(data), "sha256": hex.EncodeToString(sum[:])})
	if r.Status != http.StatusCreated {
		t.Fatalf("create artifact: %d %s", r.Status, r.Body)
	}
	var c struct {
		Artifact struct {
			ID string `json:"id"`
		} `json:"artifact"`
		Upload struct {
			Parts []struct {
				Method  string            `json:"method"`
				URL     string            `json:"url"`
				Headers map[string]string `json:"headers"`
			} `json:"parts"`
		} `json:"upload"`
	}
	r.JSON(t, &c)
	for _, p := range c.Upload.Parts {
		req, err := http.NewRequest(p.Method, p.URL, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range p.Headers {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("upload: %d", res.StatusCode)
		}
	}
	if r := w.Do(http.MethodPost, "/v1/artifacts/"+c.Artifact.ID+"/complete", apitest.AliceToken, nil); r.Status != http.StatusOK {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
	return c.Artifact.ID
}

// readyEnvironment leases a shell environment with bob's token and makes it
// ready on a node that serves tunnels, once.
func (w *makerWorld) readyEnvironment() string {
	t := w.t
	t.Helper()
	if w.ready != "" {
		return w.ready
	}
	cr := w.Do(http.MethodPost, "/v1/nodes/credentials", apitest.AliceToken, map[string]any{"pool": "local", "name": "rack"})
	cred, _ := cr.Map(t)["token"].(string)
	reg := w.Do(http.MethodPost, "/v1/nodes", cred, map[string]any{"name": "n1", "address": "127.0.0.1", "capacity": 4,
		"tunnelURL": "ws://127.0.0.1:7443/tunnel"})
	node, _ := field("node", "id")(reg.Map(t)).(string)
	lease := w.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "shell"})
	id, _ := field("environment", "id")(lease.Map(t)).(string)
	if node == "" || id == "" {
		t.Fatalf("register %d %s; lease %d %s", reg.Status, reg.Body, lease.Status, lease.Body)
	}
	w.Clock.Advance(1500 * time.Millisecond)
	claim := w.Do(http.MethodPost, "/v1/nodes/"+node+"/claim?wait=1s", cred, nil)
	if claim.Status != http.StatusOK {
		t.Fatalf("claim: %d %s", claim.Status, claim.Body)
	}
	ready := map[string]any{"state": "ready", "exports": []map[string]string{{"service": "web", "target": "127.0.0.1:41234"}}}
	if r := w.Do(http.MethodPost, "/v1/nodes/"+node+"/environments/"+id+"/report", cred, ready); r.Status != http.StatusOK {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}
	w.ready = id
	return id
}

// The read routes that answer with a ticket for the node (a running
// environment's log, network log and metrics) never hand out one that
// outlives the token that asked.
func TestReadTicketsNeverOutliveTheirMaker(t *testing.T) {
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route { return apitest.AllRoutes(e, nil) })
	w := &makerWorld{Env: e, t: t}
	tokenExpiry := e.Clock.Now().Add(2 * time.Minute)
	tok := w.token(map[string]any{"scopes": []string{"environments:read"}, "expiresIn": "2m"})
	id := w.readyEnvironment()
	for _, route := range []string{"logs", "metrics"} {
		r := e.Do("GET", "/v1/environments/"+id+"/"+route, tok, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", route, r.Status, r.Body)
		}
		got, _ := field("live", "expires")(r.Map(t)).(string)
		at, err := time.Parse(time.RFC3339Nano, got)
		if err != nil || at.After(tokenExpiry) {
			t.Errorf("%s ticket of a token that expires at %s expires at %q: %s", route, tokenExpiry, got, r.Body)
		}
	}
}
