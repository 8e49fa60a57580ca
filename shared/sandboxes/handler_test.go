package sandboxes_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/sandboxes"
)

func newEnv(t *testing.T) *apitest.Env {
	return apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		return [][]httpapi.Route{sandboxes.Routes(sandboxes.NewService(e.Store, e.Clock))}
	})
}

type registered struct {
	Sandbox map[string]any `json:"sandbox"`
	JoinKey string         `json:"joinKey"`
}

func register(t *testing.T, e *apitest.Env, token string, body any) registered {
	t.Helper()
	r := e.Do(http.MethodPost, "/v1/sandboxes", token, body)
	if r.Status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	var out registered
	r.JSON(t, &out)
	return out
}

func TestRegisterReturnsSandboxAndJoinKey(t *testing.T) {
	e := newEnv(t)
	r := e.Do(http.MethodPost, "/v1/sandboxes", apitest.BobToken, map[string]any{"name": "bob-laptop", "hostname": "bob.local", "publicKey": "ssh-ed25519 AAAA"})
	if r.Status != 201 || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	var out registered
	r.JSON(t, &out)
	sb := out.Sandbox
	if !strings.HasPrefix(out.JoinKey, sandboxes.PrefixJoinKey) || len(out.JoinKey) < 40 {
		t.Fatalf("join key %q", out.JoinKey)
	}
	if !strings.HasPrefix(sb["id"].(string), "sbx_") || sb["name"] != "bob-laptop" || sb["hostname"] != "bob.local" ||
		sb["publicKey"] != "ssh-ed25519 AAAA" || sb["createdBy"] != "bob" || sb["joined"] != nil ||
		sb["created"] != "2026-03-14T09:00:00Z" || !strings.HasPrefix(out.JoinKey, sb["joinKeyPrefix"].(string)) {
		t.Fatalf("sandbox %v", sb)
	}
	if r.Header.Get("Location") != "/v1/sandboxes/"+sb["id"].(string) {
		t.Fatalf("Location %q", r.Header.Get("Location"))
	}
	// The join key is stored only as a hash.
	scan, err := e.Store.DB().Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(e.Store.Table())})
	if err != nil {
		t.Fatal(err)
	}
	secret := out.JoinKey[len(sandboxes.PrefixJoinKey)+4:]
	for _, it := range scan.Items {
		for _, v := range it {
			if s, ok := v.(*types.AttributeValueMemberS); ok && strings.Contains(s.Value, secret) {
				t.Fatalf("join key stored in plain text in %v", it["PK"])
			}
		}
	}
}

func TestJoinKeyIsSingleUse(t *testing.T) {
	e := newEnv(t)
	out := register(t, e, apitest.AliceToken, map[string]any{"name": "ci-runner"})
	id := out.Sandbox["id"].(string)
	// Another organization cannot redeem it: it does not exist there.
	if r := e.Do("POST", "/v1/sandboxes/join", apitest.CarolToken, map[string]any{"joinKey": out.JoinKey}); r.Status != 404 || r.Code() != "not_found" {
		t.Fatalf("globex redeeming acme's key: %d %s", r.Status, r.Body)
	}
	e.Clock.Advance(90e9)
	// Redeemed concurrently ten times: exactly one succeeds, the rest are 410.
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.Do("POST", "/v1/sandboxes/join", apitest.BobToken, map[string]any{"joinKey": out.JoinKey})
			mu.Lock()
			statuses[r.Status]++
			mu.Unlock()
			if r.Status == 200 {
				sb := r.Map(t)["sandbox"].(map[string]any)
				if sb["id"] != id || sb["joined"] != "2026-03-14T09:01:30Z" {
					t.Errorf("joined sandbox %v", sb)
				}
			} else if r.Code() != "gone" {
				t.Errorf("redeem: %d %s", r.Status, r.Body)
			}
		}()
	}
	wg.Wait()
	if statuses[200] != 1 || statuses[410] != 9 {
		t.Fatalf("statuses %v", statuses)
	}
	if r := e.Do("POST", "/v1/sandboxes/join", apitest.AliceToken, map[string]any{"joinKey": out.JoinKey}); r.Status != 410 || r.Code() != "gone" {
		t.Fatalf("second redeem: %d %s", r.Status, r.Body)
	}
	r := e.Do("GET", "/v1/sandboxes/"+id, apitest.AliceToken, nil)
	if r.Status != 200 || r.Map(t)["sandbox"].(map[string]any)["joined"] != "2026-03-14T09:01:30Z" {
		t.Fatalf("get after join: %d %s", r.Status, r.Body)
	}
	// Unknown and malformed keys.
	if r := e.Do("POST", "/v1/sandboxes/join", apitest.AliceToken, map[string]any{"joinKey": sandboxes.PrefixJoinKey + "unknown0000000000000000000000000000000000"}); r.Status != 404 {
		t.Fatalf("unknown key: %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", "/v1/sandboxes/join", apitest.AliceToken, map[string]any{"joinKey": ""}); r.Status != 422 || !strings.Contains(string(r.Body), "joinKey") {
		t.Fatalf("empty key: %d %s", r.Status, r.Body)
	}
}

func TestListAndCrossOrganization(t *testing.T) {
	e := newEnv(t)
	a := register(t, e, apitest.AliceToken, map[string]any{"name": "one"}).Sandbox["id"].(string)
	e.Clock.Advance(1e9)
	b := register(t, e, apitest.BobToken, map[string]any{"name": "two"}).Sandbox["id"].(string)
	g := register(t, e, apitest.CarolToken, map[string]any{"name": "globex"}).Sandbox["id"].(string)
	var list struct {
		Sandboxes []map[string]any `json:"sandboxes"`
	}
	e.Do("GET", "/v1/sandboxes", apitest.AliceToken, nil).JSON(t, &list)
	if len(list.Sandboxes) != 2 || list.Sandboxes[0]["id"] != b || list.Sandboxes[1]["id"] != a {
		t.Fatalf("acme's sandboxes, newest first: %v", list.Sandboxes)
	}
	for _, id := range []string{a, b} {
		if r := e.Do("GET", "/v1/sandboxes/"+id, apitest.CarolToken, nil); r.Status != 404 || r.Code() != "not_found" {
			t.Fatalf("globex reading acme's sandbox: %d", r.Status)
		}
	}
	if r := e.Do("GET", "/v1/sandboxes/"+g, apitest.AliceToken, nil); r.Status != 404 {
		t.Fatalf("acme reading globex's sandbox: %d", r.Status)
	}
	var empty struct {
		Sandboxes []map[string]any `json:"sandboxes"`
	}
	r := e.Do("GET", "/v1/sandboxes", apitest.CarolToken, nil)
	r.JSON(t, &empty)
	if len(empty.Sandboxes) != 1 || empty.Sandboxes[0]["id"] != g {
		t.Fatalf("globex list: %s", r.Body)
	}
}

func TestRegisterRefusals(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		name   string
		body   any
		status int
		field  string
	}{
		{"no name", `{}`, 422, "name"},
		{"blank name", `{"name":"  "}`, 422, "name"},
		{"long name", map[string]any{"name": strings.Repeat("n", 101)}, 422, "name"},
		{"control hostname", map[string]any{"name": "a", "hostname": "a\x00b"}, 422, "hostname"},
		{"unknown field", `{"name":"a","os":"linux"}`, 400, "os"},
		{"wrong type", `{"name":1}`, 400, "name"},
		{"malformed", `{"name":`, 400, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.Do("POST", "/v1/sandboxes", apitest.AliceToken, c.body)
			var b struct{ Field string }
			r.JSON(t, &b)
			if r.Status != c.status || b.Field != c.field {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
		})
	}
	if r := e.Do("GET", "/v1/sandboxes", "", nil); r.Status != 401 {
		t.Fatalf("no token: %d", r.Status)
	}
}
