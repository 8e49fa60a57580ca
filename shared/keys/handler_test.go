package keys_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/truora/minidyn/server"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/fixture"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/keys"
)

func newEnv(t *testing.T) *apitest.Env {
	return apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		svc := keys.NewService(e.Store, e.Clock)
		return [][]httpapi.Route{keys.TokenRoutes(svc), keys.KeyRoutes(svc)}
	})
}

type issued struct {
	Token  string         `json:"token"`
	APIKey map[string]any `json:"apiKey"`
}

func TestCreateTokenActsAsCaller(t *testing.T) {
	e := newEnv(t)
	res := e.Do(http.MethodPost, "/v1/tokens", apitest.BobToken, map[string]any{"name": "laptop"})
	if res.Status != http.StatusCreated {
		t.Fatalf("status %d: %s", res.Status, res.Body)
	}
	var out issued
	res.JSON(t, &out)
	if !strings.HasPrefix(out.Token, "els_cli_") || len(out.Token) < 40 {
		t.Fatalf("token %q", out.Token)
	}
	for _, f := range []string{"id", "kind", "name", "prefix", "createdBy", "source", "created", "lastUsed", "revoked"} {
		if _, ok := out.APIKey[f]; !ok {
			t.Errorf("apiKey lacks %q: %v", f, out.APIKey)
		}
	}
	if out.APIKey["kind"] != "org" || out.APIKey["createdBy"] != "bob" || out.APIKey["name"] != "laptop" {
		t.Errorf("record %v", out.APIKey)
	}
	if p := out.APIKey["prefix"].(string); !strings.HasPrefix(out.Token, p) || len(p) < 8 {
		t.Errorf("prefix %q of %q", p, out.Token)
	}
	if res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("token response is cacheable")
	}
	// The new token acts as bob: a member, so it cannot create org keys.
	if r := e.Do(http.MethodPost, "/v1/keys", out.Token, map[string]any{"name": "ci"}); r.Status != http.StatusForbidden || r.Code() != "forbidden" {
		t.Fatalf("member's new token creating a key: %d %s", r.Status, r.Body)
	}
	// And it lists bob's own tokens.
	var list struct {
		Keys []map[string]any `json:"keys"`
	}
	e.Do(http.MethodGet, "/v1/keys", out.Token, nil).JSON(t, &list)
	if len(list.Keys) != 2 {
		t.Fatalf("bob sees %d keys, want his 2: %v", len(list.Keys), list.Keys)
	}
}

func TestPlainTokenIsStoredNowhere(t *testing.T) {
	e := newEnv(t)
	var out issued
	e.Do(http.MethodPost, "/v1/tokens", apitest.AliceToken, map[string]any{"name": "a"}).JSON(t, &out)
	var key issued
	e.Do(http.MethodPost, "/v1/keys", apitest.AliceToken, map[string]any{"name": "b"}).JSON(t, &key)
	secrets := []string{out.Token, key.Token, apitest.AliceToken, apitest.BobToken}
	scan, err := e.Store.DB().Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(e.Store.Table())})
	if err != nil {
		t.Fatal(err)
	}
	if len(scan.Items) == 0 {
		t.Fatal("empty table")
	}
	for _, item := range scan.Items {
		raw := strings.ToLower(strings.Join(flatten(item), "\x00"))
		for _, s := range secrets {
			// The full token, and any 20-character window of its secret part.
			for i := 0; i+20 <= len(s); i += 5 {
				if strings.Contains(raw, strings.ToLower(s[i:i+20])) && i+20 > 12 {
					t.Fatalf("item %v holds part of token %q", item["PK"], s[:12])
				}
			}
		}
	}
}

func TestKeysAreAdminOnlyAndRevocable(t *testing.T) {
	e := newEnv(t)
	if r := e.Do(http.MethodPost, "/v1/keys", apitest.BobToken, map[string]any{"name": "x"}); r.Status != 403 || r.Code() != "forbidden" {
		t.Fatalf("member creating key: %d %s", r.Status, r.Body)
	}
	res := e.Do(http.MethodPost, "/v1/keys", apitest.AliceToken, map[string]any{"name": "deploy"})
	if res.Status != http.StatusCreated {
		t.Fatalf("create key: %d %s", res.Status, res.Body)
	}
	var k issued
	res.JSON(t, &k)
	owner := k.APIKey["owner"].(map[string]any)
	if k.APIKey["kind"] != "org" || owner["kind"] != "organization" || owner["id"] != "acme" || k.APIKey["source"] != "api" {
		t.Fatalf("org key record %v", k.APIKey)
	}
	// The key works, and appears in the admin's listing without any secret.
	if r := e.Do(http.MethodGet, "/v1/keys", k.Token, nil); r.Status != 200 {
		t.Fatalf("org key rejected: %d %s", r.Status, r.Body)
	}
	list := e.Do(http.MethodGet, "/v1/keys", apitest.AliceToken, nil)
	if strings.Contains(string(list.Body), k.Token) || strings.Contains(string(list.Body), `"hash"`) || !strings.Contains(string(list.Body), k.APIKey["id"].(string)) {
		t.Fatalf("listing: %s", list.Body)
	}
	id := k.APIKey["id"].(string)
	// A member cannot revoke the organization's key; another org cannot see it.
	if r := e.Do(http.MethodDelete, "/v1/keys/"+id, apitest.BobToken, nil); r.Status != 403 {
		t.Fatalf("member revoking org key: %d %s", r.Status, r.Body)
	}
	if r := e.Do(http.MethodDelete, "/v1/keys/"+id, apitest.CarolToken, nil); r.Status != 404 || r.Code() != "not_found" {
		t.Fatalf("other org revoking: %d %s", r.Status, r.Body)
	}
	r := e.Do(http.MethodDelete, "/v1/keys/"+id, apitest.AliceToken, nil)
	if r.Status != 200 || r.Map(t)["apiKey"].(map[string]any)["revoked"] == nil {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	if r := e.Do(http.MethodGet, "/v1/keys", k.Token, nil); r.Status != 401 || r.Code() != "unauthorized" {
		t.Fatalf("revoked key: %d %s", r.Status, r.Body)
	}
	if r := e.Do(http.MethodDelete, "/v1/keys/"+id, apitest.AliceToken, nil); r.Status != 200 {
		t.Fatalf("second revoke: %d %s", r.Status, r.Body)
	}
}

func TestMemberRevokesOwnTokenOnly(t *testing.T) {
	e := newEnv(t)
	var bobs, alices issued
	e.Do(http.MethodPost, "/v1/tokens", apitest.BobToken, map[string]any{"name": "b"}).JSON(t, &bobs)
	e.Do(http.MethodPost, "/v1/tokens", apitest.AliceToken, map[string]any{"name": "a"}).JSON(t, &alices)
	if r := e.Do(http.MethodDelete, "/v1/keys/"+alices.APIKey["id"].(string), apitest.BobToken, nil); r.Status != 403 {
		t.Fatalf("bob revoking alice's token: %d", r.Status)
	}
	if r := e.Do(http.MethodDelete, "/v1/keys/"+bobs.APIKey["id"].(string), apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("bob revoking his token: %d %s", r.Status, r.Body)
	}
	if r := e.Do(http.MethodDelete, "/v1/keys/key_nope", apitest.BobToken, nil); r.Status != 404 {
		t.Fatalf("unknown key: %d", r.Status)
	}
}

// A CLI token acts with its person's role as configured now: applying a
// configuration that changes the role reaches the tokens already issued.
func TestRoleChangeReachesIssuedTokens(t *testing.T) {
	e := newEnv(t)
	var cli issued
	e.Do(http.MethodPost, "/v1/tokens", apitest.AliceToken, map[string]any{"name": "laptop"}).JSON(t, &cli)
	withRole := func(role domain.Role) {
		t.Helper()
		f := apitest.Fixture(t)
		for i := range f.Orgs {
			for j := range f.Orgs[i].Users {
				if f.Orgs[i].ID == "acme" && f.Orgs[i].Users[j].ID == "alice" {
					f.Orgs[i].Users[j].Role = role
				}
			}
		}
		if err := fixture.Apply(context.Background(), e.Store, f, fixture.Options{Now: apitest.Start}); err != nil {
			t.Fatal(err)
		}
	}
	withRole(domain.RoleMember)
	for _, tok := range []string{apitest.AliceToken, cli.Token} {
		if r := e.Do(http.MethodPost, "/v1/keys", tok, map[string]any{"name": "ci"}); r.Status != 403 {
			t.Fatalf("demoted admin's token creating a key: %d %s", r.Status, r.Body)
		}
	}
	// Bob's role and the organization key are untouched.
	if r := e.Do(http.MethodPost, "/v1/keys", apitest.BobToken, map[string]any{"name": "ci"}); r.Status != 403 {
		t.Fatalf("bob: %d", r.Status)
	}
	withRole(domain.RoleAdmin)
	for _, tok := range []string{apitest.AliceToken, cli.Token} {
		if r := e.Do(http.MethodPost, "/v1/keys", tok, map[string]any{"name": "ci"}); r.Status != 201 {
			t.Fatalf("promoted again: %d %s", r.Status, r.Body)
		}
	}
}

func TestErrors(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name, method, path, token string
		body                      any
		status                    int
		code, contains            string
	}{
		{"no token", "GET", "/v1/keys", "", nil, 401, "unauthorized", "missing"},
		{"unknown token", "GET", "/v1/keys", "els_cli_doesnotexist0000000000000000", nil, 401, "unauthorized", "unknown"},
		{"malformed token", "GET", "/v1/keys", "short", nil, 401, "unauthorized", "malformed"},
		{"unknown route", "GET", "/v1/nope", apitest.AliceToken, nil, 404, "not_found", "/v1/nope"},
		{"wrong method", "PUT", "/v1/keys", apitest.AliceToken, nil, 405, "method_not_allowed", "GET, HEAD, POST"},
		{"malformed json", "POST", "/v1/tokens", apitest.AliceToken, `{"name":`, 400, "bad_request", "malformed"},
		{"unknown field", "POST", "/v1/tokens", apitest.AliceToken, `{"name":"a","nmae":"b"}`, 400, "bad_request", `"nmae"`},
		{"wrong type", "POST", "/v1/tokens", apitest.AliceToken, `{"name":5}`, 400, "bad_request", `"name"`},
		{"not an object", "POST", "/v1/tokens", apitest.AliceToken, `[1]`, 400, "bad_request", "object"},
		{"empty name", "POST", "/v1/tokens", apitest.AliceToken, `{"name":""}`, 422, "invalid", "name"},
		{"bad source", "POST", "/v1/tokens", apitest.AliceToken, `{"name":"a","source":"x"}`, 422, "invalid", "source"},
		{"too large", "POST", "/v1/tokens", apitest.AliceToken, `{"name":"` + strings.Repeat("a", 1<<20) + `"}`, 413, "too_large", "larger"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.RemoteAddr = "198.51.100." + string(rune('0'+len(c.name)%10)) + ":1" // keep failures from blocking each other
			r := e.Do(c.method, c.path, c.token, c.body)
			if r.Status != c.status || r.Code() != c.code || !strings.Contains(string(r.Body), c.contains) {
				t.Fatalf("got %d %s", r.Status, r.Body)
			}
			if c.status == 405 && r.Header.Get("Allow") != "GET, HEAD, POST" {
				t.Fatalf("Allow %q", r.Header.Get("Allow"))
			}
		})
	}
}

func TestFailedAttemptsBlockTheAddress(t *testing.T) {
	e := newEnv(t)
	e.RemoteAddr = "203.0.113.7:5555"
	for i := 0; i < 9; i++ {
		if r := e.Do("GET", "/v1/keys", "els_cli_wrongwrongwrongwrongwrong", nil); r.Status != 401 {
			t.Fatalf("attempt %d: %d", i, r.Status)
		}
	}
	// A spoofed forwarding header changes nothing: the peer address counts.
	// The tenth failure is itself a 401; the block starts after it.
	r := e.DoWith("GET", "/v1/keys", "", nil, http.Header{"X-Forwarded-For": {"10.9.9.9"}})
	if r.Status != 401 || r.Code() != "unauthorized" {
		t.Fatalf("10th failure: %d %s", r.Status, r.Body)
	}
	r = e.DoWith("GET", "/v1/keys", "", nil, http.Header{"X-Forwarded-For": {"10.9.9.9"}})
	if r.Status != 429 || r.Code() != "locked" || r.Header.Get("Retry-After") != "60" {
		t.Fatalf("11th attempt: %d %s retry=%q", r.Status, r.Body, r.Header.Get("Retry-After"))
	}
	// Even a valid token is refused from a blocked address...
	e.Clock.Advance(30e9)
	if r := e.Do("GET", "/v1/keys", apitest.AliceToken, nil); r.Status != 429 || r.Header.Get("Retry-After") != "30" {
		t.Fatalf("valid token while blocked: %d retry=%q", r.Status, r.Header.Get("Retry-After"))
	}
	// ...but not from another address, and not after the block ends.
	e.RemoteAddr = "203.0.113.8:5555"
	if r := e.Do("GET", "/v1/keys", apitest.AliceToken, nil); r.Status != 200 {
		t.Fatalf("other address: %d", r.Status)
	}
	e.RemoteAddr = "203.0.113.7:5555"
	e.Clock.Advance(31e9)
	if r := e.Do("GET", "/v1/keys", apitest.AliceToken, nil); r.Status != 200 {
		t.Fatalf("after block: %d %s", r.Status, r.Body)
	}
}

func TestFailuresOutsideTheWindowDoNotBlock(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 15; i++ {
		if r := e.Do("GET", "/v1/keys", "", nil); r.Status != 401 {
			t.Fatalf("attempt %d: %d", i, r.Status)
		}
		e.Clock.Advance(7e9) // 15 failures over 105 s: never 10 within 60 s
	}
}

// The window slides: any 10 failures within 60 s block, wherever the first
// failure of the address fell.
func TestTenFailuresWithinAnySixtySecondsBlock(t *testing.T) {
	e := newEnv(t)
	fail := func(want int) {
		t.Helper()
		if r := e.Do("GET", "/v1/keys", "", nil); r.Status != want {
			t.Fatalf("at +%s: %d %s, want %d", e.Clock.Now().Sub(apitest.Start), r.Status, r.Body, want)
		}
	}
	fail(401) // +0s
	e.Clock.Advance(30e9)
	for i := 0; i < 8; i++ {
		fail(401) // +30s: 9 within 60 s
	}
	e.Clock.Advance(31e9)
	fail(401) // +61s: the first has aged out, 9 within 60 s
	e.Clock.Advance(1e9)
	fail(401) // +62s: 10 within the last 60 s; this one is still answered as a failure
	r := e.Do("GET", "/v1/keys", apitest.AliceToken, nil)
	if r.Status != 429 || r.Code() != "locked" || r.Header.Get("Retry-After") != "60" {
		t.Fatalf("valid token from the blocked address: %d %s retry=%q", r.Status, r.Body, r.Header.Get("Retry-After"))
	}
}

// Failures that never block keep the address's record small, and concurrent
// failures are all counted.
func TestFailureRecordStaysSmallAndCountsConcurrentFailures(t *testing.T) {
	e := newEnv(t)
	e.RemoteAddr = "192.0.2.50:1"
	for i := 0; i < 60; i++ {
		if r := e.Do("GET", "/v1/keys", "", nil); r.Status != 401 {
			t.Fatalf("attempt %d: %d", i, r.Status)
		}
		e.Clock.Advance(7e9)
	}
	out, err := e.Store.DB().GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(e.Store.Table()),
		Key: map[string]types.AttributeValue{
			"PK": &types.AttributeValueMemberS{Value: "ADDR#192.0.2.50"}, "SK": &types.AttributeValueMemberS{Value: "ADDR"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := out.Item["recent"].(*types.AttributeValueMemberL); !ok || len(l.Value) > 21 {
		t.Fatalf("failure record after 60 spaced failures: %v", out.Item)
	}

	e.RemoteAddr = "192.0.2.51:1"
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := e.Do("GET", "/v1/keys", "", nil); r.Status != 401 && r.Status != 429 {
				t.Errorf("concurrent failure: %d", r.Status)
			}
		}()
	}
	wg.Wait()
	if r := e.Do("GET", "/v1/keys", apitest.AliceToken, nil); r.Status != 429 || r.Code() != "locked" {
		t.Fatalf("after 10 concurrent failures: %d %s", r.Status, r.Body)
	}
}

func TestUnavailableTable(t *testing.T) {
	devstack.NeedsMinidyn(t)
	e := newEnv(t)
	e.Dynamo.Server.EmulateFailure(server.FailureConditionInternalServerError)
	r := e.Do("GET", "/v1/keys", apitest.AliceToken, nil)
	if r.Status != 503 || r.Code() != "unavailable" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
	if strings.Contains(strings.ToLower(string(r.Body)), "internalserver") || strings.Contains(string(r.Body), "minidyn") {
		t.Fatalf("internal text leaked: %s", r.Body)
	}
	e.Dynamo.Server.EmulateFailure(server.FailureConditionNone)
	if r := e.Do("GET", "/v1/keys", apitest.AliceToken, nil); r.Status != 200 {
		t.Fatalf("after recovery: %d %s", r.Status, r.Body)
	}
}
