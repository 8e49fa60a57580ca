package environments_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/truora/minidyn/server"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/sandboxes"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/templates"
)

func routes(st *store.Store, clk clock.Clock) [][]httpapi.Route {
	return [][]httpapi.Route{
		environments.Routes(environments.NewService(st, clk)),
		sandboxes.Routes(sandboxes.NewService(st, clk)),
		templates.QuotaRoutes(templates.NewService(st)),
	}
}

func newEnv(t testing.TB) *apitest.Env {
	return apitest.New(t, func(e *apitest.Env) [][]httpapi.Route { return routes(e.Store, e.Clock) })
}

type envJSON = map[string]any

type leased struct {
	Environment envJSON `json:"environment"`
	Config      envJSON `json:"config"`
}

func lease(t *testing.T, e *apitest.Env, token string, body any) leased {
	t.Helper()
	r := e.Do(http.MethodPost, "/v1/environments", token, body)
	if r.Status != http.StatusCreated {
		t.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	var out leased
	r.JSON(t, &out)
	return out
}

func sandbox(t *testing.T, e *apitest.Env, token string) string {
	t.Helper()
	r := e.Do(http.MethodPost, "/v1/sandboxes", token, map[string]any{"name": "laptop", "hostname": "laptop.local"})
	if r.Status != http.StatusCreated {
		t.Fatalf("register sandbox: %d %s", r.Status, r.Body)
	}
	return r.Map(t)["sandbox"].(map[string]any)["id"].(string)
}

// running returns the quota's running count of a template and the number of
// live environments of it the listing shows: the two must always agree.
func running(t *testing.T, e *apitest.Env, template string) (int, int) {
	t.Helper()
	var q struct {
		Quotas []struct {
			Template string `json:"template"`
			Running  int    `json:"running"`
		} `json:"quotas"`
	}
	e.Do(http.MethodGet, "/v1/quotas", apitest.AliceToken, nil).JSON(t, &q)
	run := -1
	for _, x := range q.Quotas {
		if x.Template == template {
			run = x.Running
		}
	}
	var l struct {
		Environments []envJSON `json:"environments"`
	}
	e.Do(http.MethodGet, "/v1/environments?limit=200", apitest.AliceToken, nil).JSON(t, &l)
	live := 0
	for _, env := range l.Environments {
		if env["template"] == template {
			live++
		}
	}
	return run, live
}

func mustTime(t *testing.T, v any) time.Time {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		t.Fatalf("timestamp %v is not a string", v)
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !strings.HasSuffix(s, "Z") {
		t.Fatalf("timestamp %q is not RFC 3339 UTC: %v", s, err)
	}
	return ts
}

func TestLeaseReturnsEnvironmentAndSandboxConfig(t *testing.T) {
	e := newEnv(t)
	sbx := sandbox(t, e, apitest.BobToken)
	out := lease(t, e, apitest.BobToken, map[string]any{
		"template": "shell", "name": "review-42", "project": "acme/web",
		"labels":  map[string]string{"team": "web", "pr": "42"},
		"sandbox": sbx,
		"shares": []map[string]any{{"name": "src", "localPath": "/home/bob/web",
			"files": []string{"main.go", "debug.log", "logs/today.log", "docs/readme.md"}}},
	})
	env := out.Environment
	for _, f := range []string{"id", "name", "template", "state", "node", "sandbox", "pool", "labels", "project",
		"readyMs", "error", "createdBy", "created", "ready", "stopped", "expires", "idleUntil", "idle", "hard",
		"exports", "shares", "snapshot", "restored"} {
		if _, ok := env[f]; !ok {
			t.Errorf("environment lacks %q", f)
		}
	}
	if !strings.HasPrefix(env["id"].(string), "env_") || env["state"] != "pending" || env["template"] != "shell" ||
		env["pool"] != "local" || env["sandbox"] != sbx || env["createdBy"] != "bob" || env["name"] != "review-42" ||
		env["project"] != "acme/web" || env["node"] != "" {
		t.Errorf("environment %v", env)
	}
	if env["idle"] != "30m" || env["hard"] != "6h" {
		t.Errorf("idle %v hard %v", env["idle"], env["hard"])
	}
	created := mustTime(t, env["created"])
	if !created.Equal(apitest.Start) {
		t.Errorf("created %v", created)
	}
	if exp := mustTime(t, env["expires"]); !exp.Equal(created.Add(6 * time.Hour)) {
		t.Errorf("expires %v, want created + hard", exp)
	}
	if iu := mustTime(t, env["idleUntil"]); !iu.Equal(created.Add(30 * time.Minute)) {
		t.Errorf("idleUntil %v", iu)
	}
	if env["ready"] != nil || env["stopped"] != nil || env["restored"] != nil {
		t.Errorf("unreached fields should be null: %v", env)
	}
	exports := env["exports"].([]any)
	if len(exports) != 1 {
		t.Fatalf("exports %v", exports)
	}
	x := exports[0].(map[string]any)
	var port int
	if x["service"] != "web" || x["target"] != "" {
		t.Errorf("export %v", x)
	}
	if _, err := fmt.Sscanf(x["listen"].(string), "127.0.0.1:%d", &port); err != nil || port < environments.PortLow || port >= environments.PortHigh {
		t.Errorf("listen %v", x["listen"])
	}
	shares := env["shares"].([]any)
	s := shares[0].(map[string]any)
	if s["name"] != "src" || s["direction"] != "in" || s["envPath"] != "/workspace" || s["localPath"] != "/home/bob/web" {
		t.Errorf("share %v", s)
	}
	if got := fmt.Sprint(s["files"]); got != "[main.go docs/readme.md]" {
		t.Errorf("files after exclude *.log: %s", got)
	}
	cfg := out.Config
	if cfg["sandbox"] != sbx || cfg["environment"] != env["id"] || fmt.Sprint(cfg["exports"]) != fmt.Sprint(env["exports"]) ||
		fmt.Sprint(cfg["shares"]) != fmt.Sprint(env["shares"]) || cfg["status"] != "/v1/environments/"+env["id"].(string) {
		t.Errorf("config %v", cfg)
	}
	// GET returns the same record, as the body itself (spec 4 row 5).
	r := e.Do(http.MethodGet, "/v1/environments/"+env["id"].(string), apitest.AliceToken, nil)
	if r.Status != 200 || fmt.Sprint(r.Map(t)) != fmt.Sprint(env) {
		t.Fatalf("get: %d %s", r.Status, r.Body)
	}
}

func TestLeaseDefaultsWithoutSandbox(t *testing.T) {
	e := newEnv(t)
	env := lease(t, e, apitest.AliceToken, map[string]any{"template": "sleeper", "idle": "90s", "hard": "30m"}).Environment
	if env["idle"] != "1m30s" || env["hard"] != "30m" || env["name"] != "sleeper" || fmt.Sprint(env["labels"]) != "map[]" ||
		fmt.Sprint(env["shares"]) != "[]" || fmt.Sprint(env["exports"]) != "[]" {
		t.Fatalf("defaults %v", env)
	}
}

func TestLeaseRefusals(t *testing.T) {
	e := newEnv(t)
	acmeSbx := sandbox(t, e, apitest.AliceToken)
	globexSbx := sandbox(t, e, apitest.CarolToken)
	ctx := context.Background()
	expired := apitest.Start.Add(-time.Hour)
	for _, a := range []domain.Artifact{
		{OrgID: "acme", ID: "art_expired", State: domain.ArtifactSealed, Created: expired.Add(-time.Hour), Expires: expired},
		{OrgID: "acme", ID: "art_open", State: domain.ArtifactOpen, Created: expired, Expires: apitest.Start.Add(time.Hour)},
		{OrgID: "globex", ID: "art_globex", State: domain.ArtifactSealed, Created: expired, Expires: apitest.Start.Add(time.Hour)},
	} {
		if err := e.Store.PutArtifact(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	manyLabels := map[string]string{}
	for i := 0; i < 33; i++ {
		manyLabels[fmt.Sprintf("k%d", i)] = "v"
	}
	cases := []struct {
		name   string
		body   any
		status int
		field  string
	}{
		{"missing template", `{}`, 422, "template"},
		{"unknown template", `{"template":"nope"}`, 422, "template"},
		{"other org's template name only", `{"template":"globex-only"}`, 422, "template"},
		{"bad label key", map[string]any{"template": "shell", "labels": map[string]string{"Bad Key": "x"}}, 422, "labels"},
		{"label key too long", map[string]any{"template": "shell", "labels": map[string]string{strings.Repeat("a", 64): "x"}}, 422, "labels"},
		{"label key ends badly", map[string]any{"template": "shell", "labels": map[string]string{"team-": "x"}}, 422, "labels"},
		{"label value too long", map[string]any{"template": "shell", "labels": map[string]string{"team": strings.Repeat("x", 257)}}, 422, "labels.team"},
		{"label value control char", map[string]any{"template": "shell", "labels": map[string]string{"team": "a\nb"}}, 422, "labels.team"},
		{"too many labels", map[string]any{"template": "shell", "labels": manyLabels}, 422, "labels"},
		{"unknown share", map[string]any{"template": "shell", "shares": []map[string]any{{"name": "home"}}}, 422, "shares[0].name"},
		{"share twice", map[string]any{"template": "shell", "shares": []map[string]any{{"name": "src"}, {"name": "src"}}}, 422, "shares[1].name"},
		{"share file escapes", map[string]any{"template": "shell", "shares": []map[string]any{{"name": "src", "files": []string{"../etc/passwd"}}}}, 422, "shares[0].files[0]"},
		{"pool not running template", `{"template":"shell","pool":"gpu"}`, 422, "pool"},
		{"unknown sandbox", `{"template":"shell","sandbox":"sbx_nope"}`, 422, "sandbox"},
		{"other org's sandbox", `{"template":"shell","sandbox":"` + globexSbx + `"}`, 422, "sandbox"},
		{"unknown snapshot", `{"template":"shell","snapshot":"art_nope"}`, 422, "snapshot"},
		{"expired snapshot", `{"template":"shell","snapshot":"art_expired"}`, 422, "snapshot"},
		{"unsealed snapshot", `{"template":"shell","snapshot":"art_open"}`, 422, "snapshot"},
		{"other org's snapshot", `{"template":"shell","snapshot":"art_globex"}`, 422, "snapshot"},
		{"idle beyond template", `{"template":"shell","idle":"31m"}`, 422, "idle"},
		{"hard beyond template", `{"template":"shell","hard":"6h0m1s"}`, 422, "hard"},
		{"idle zero", `{"template":"shell","idle":"0s"}`, 422, "idle"},
		{"hard negative", `{"template":"shell","hard":"-1h"}`, 422, "hard"},
		{"idle not a duration", `{"template":"shell","idle":"soon"}`, 422, "idle"},
		{"network rules for a template without a boundary", map[string]any{"template": "shell", "network": map[string]any{"deny": []string{"x.test"}}}, 422, "network"},
		{"malformed json", `{"template":`, 400, ""},
		{"template not a string", `{"template":5}`, 400, "template"},
		{"labels not an object", `{"template":"shell","labels":["a"]}`, 400, "labels"},
		{"idle not a string", `{"template":"shell","idle":30}`, 400, "idle"},
		{"unknown field", `{"template":"shell","tempalte":"x"}`, 400, "tempalte"},
		{"not an object", `["shell"]`, 400, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.Do(http.MethodPost, "/v1/environments", apitest.AliceToken, c.body)
			var b struct{ Error, Code, Field string }
			r.JSON(t, &b)
			wantCode := map[int]string{422: "invalid", 400: "bad_request"}[c.status]
			if r.Status != c.status || b.Code != wantCode || b.Field != c.field {
				t.Fatalf("got %d %s", r.Status, r.Body)
			}
			if c.field != "" && c.status == 422 && !strings.Contains(b.Error, strings.Split(strings.Split(c.field, ".")[0], "[")[0]) {
				t.Fatalf("message does not name the field %q: %s", c.field, b.Error)
			}
		})
	}
	// A valid lease with the acme sandbox works, so the refusals above were the rules.
	lease(t, e, apitest.AliceToken, map[string]any{"template": "sleeper", "sandbox": acmeSbx})
	// Nothing was leased by any refused request.
	if run, live := running(t, e, "shell"); run != 0 || live != 0 {
		t.Fatalf("after refusals: running %d, live %d", run, live)
	}
	scan, _ := e.Store.DB().Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(e.Store.Table())})
	n := 0
	for _, it := range scan.Items {
		if strings.HasPrefix(it["SK"].(*types.AttributeValueMemberS).Value, "ENV#") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d environment items, want the 1 valid lease", n)
	}
}

func TestQuotaIsExactUnderConcurrency(t *testing.T) {
	e := newEnv(t)
	burst := func(n int) (created []string, quota int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := e.Do(http.MethodPost, "/v1/environments", apitest.AliceToken, `{"template":"sleeper"}`)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case r.Status == 201:
					var out leased
					r.JSON(t, &out)
					created = append(created, out.Environment["id"].(string))
				case r.Status == 429 && r.Code() == "quota":
					quota++
					if msg := string(r.Body); !strings.Contains(msg, "at most 3") || !strings.Contains(msg, "delete a live environment") {
						t.Errorf("429 message: %s", msg)
					}
				default:
					t.Errorf("unexpected %d %s", r.Status, r.Body)
				}
			}()
		}
		wg.Wait()
		return created, quota
	}
	created, quota := burst(50)
	if len(created) != 3 || quota != 47 {
		t.Fatalf("50 concurrent leases: %d created, %d quota refusals; want 3 and 47", len(created), quota)
	}
	if run, live := running(t, e, "sleeper"); run != 3 || live != 3 {
		t.Fatalf("after burst: running %d, live %d", run, live)
	}
	if r := e.Do(http.MethodDelete, "/v1/environments/"+created[0], apitest.AliceToken, nil); r.Status != 200 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	if run, live := running(t, e, "sleeper"); run != 2 || live != 2 {
		t.Fatalf("after delete: running %d, live %d", run, live)
	}
	again, quota := burst(20)
	if len(again) != 1 || quota != 19 {
		t.Fatalf("after one delete: %d created, %d refused; want exactly 1 more", len(again), quota)
	}
	if run, live := running(t, e, "sleeper"); run != 3 || live != 3 {
		t.Fatalf("at the end: running %d, live %d", run, live)
	}
	// Other templates and organizations have their own quotas.
	lease(t, e, apitest.AliceToken, `{"template":"shell"}`)
	lease(t, e, apitest.CarolToken, `{"template":"shell"}`)
}

// GET, touch and DELETE of one environment answer with the environment itself
// (spec 4 row 5): the body is the record the lease returned, with `state` at
// the top level, not wrapped in another object.
func TestSingleEnvironmentBodyIsTheEnvironment(t *testing.T) {
	e := newEnv(t)
	env := lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`).Environment
	id := env["id"].(string)
	for _, c := range []struct{ method, path, state string }{
		{"GET", "/v1/environments/" + id, "pending"},
		{"POST", "/v1/environments/" + id + "/touch", "pending"},
		{"DELETE", "/v1/environments/" + id, "stopped"},
	} {
		r := e.Do(c.method, c.path, apitest.AliceToken, nil)
		got := r.Map(t)
		if r.Status != 200 || got["id"] != id || got["state"] != c.state || len(got) != len(env) {
			t.Errorf("%s %s: %d %s", c.method, c.path, r.Status, r.Body)
		}
		if _, wrapped := got["environment"]; wrapped {
			t.Errorf("%s %s wraps the environment: %s", c.method, c.path, r.Body)
		}
	}
}

func TestOtherOrganizationsEnvironmentIsNotFound(t *testing.T) {
	e := newEnv(t)
	id := lease(t, e, apitest.AliceToken, `{"template":"shell"}`).Environment["id"].(string)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/environments/" + id},
		{"DELETE", "/v1/environments/" + id},
		{"POST", "/v1/environments/" + id + "/touch"},
		{"GET", "/v1/environments/env_doesnotexist"},
		{"GET", "/v1/environments/not-an-id"},
	} {
		r := e.Do(c.method, c.path, apitest.CarolToken, nil)
		if r.Status != 404 || r.Code() != "not_found" {
			t.Errorf("%s %s as globex: %d %s", c.method, c.path, r.Status, r.Body)
		}
	}
	var l struct {
		Environments []envJSON `json:"environments"`
	}
	e.Do("GET", "/v1/environments", apitest.CarolToken, nil).JSON(t, &l)
	if len(l.Environments) != 0 {
		t.Fatalf("globex lists acme's environment: %v", l.Environments)
	}
	// Bob, of the same organization, sees it.
	if r := e.Do("GET", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("bob: %d", r.Status)
	}
}

type page struct {
	Environments []envJSON `json:"environments"`
	Next         string    `json:"next"`
}

func ids(p page) []string {
	var out []string
	for _, e := range p.Environments {
		out = append(out, e["id"].(string))
	}
	return out
}

func TestListLiveNewestFirstWithStateFilterAndCursor(t *testing.T) {
	e := newEnv(t)
	var made []string // oldest first
	for _, tmpl := range []string{"shell", "sleeper", "shell", "sleeper", "sleeper"} {
		made = append(made, lease(t, e, apitest.AliceToken, map[string]any{"template": tmpl}).Environment["id"].(string))
		e.Clock.Advance(time.Second)
	}
	// Stop the oldest two.
	for _, id := range made[:2] {
		if r := e.Do("DELETE", "/v1/environments/"+id, apitest.AliceToken, nil); r.Status != 200 {
			t.Fatal(r.Status)
		}
	}
	var all page
	e.Do("GET", "/v1/environments", apitest.AliceToken, nil).JSON(t, &all)
	if got, want := fmt.Sprint(ids(all)), fmt.Sprint([]string{made[4], made[3], made[2]}); got != want || all.Next != "" {
		t.Fatalf("live listing %s next %q, want %s newest first", got, all.Next, want)
	}
	// Pages of two, following next.
	var p1, p2 page
	e.Do("GET", "/v1/environments?limit=2", apitest.AliceToken, nil).JSON(t, &p1)
	if len(p1.Environments) != 2 || p1.Next == "" {
		t.Fatalf("page 1: %v next %q", ids(p1), p1.Next)
	}
	e.Do("GET", "/v1/environments?limit=2&cursor="+p1.Next, apitest.AliceToken, nil).JSON(t, &p2)
	if got := fmt.Sprint(append(ids(p1), ids(p2)...)); got != fmt.Sprint(ids(all)) {
		t.Fatalf("pages %s, want %s", got, ids(all))
	}
	if p2.Next != "" {
		// DynamoDB may return a last empty page; following it must end the listing.
		var p3 page
		e.Do("GET", "/v1/environments?limit=2&cursor="+p2.Next, apitest.AliceToken, nil).JSON(t, &p3)
		if len(p3.Environments) != 0 || p3.Next != "" {
			t.Fatalf("page 3: %v", ids(p3))
		}
	}
	// The state filter reaches stopped ones, newest first.
	var stopped page
	e.Do("GET", "/v1/environments?state=stopped", apitest.AliceToken, nil).JSON(t, &stopped)
	if got := fmt.Sprint(ids(stopped)); got != fmt.Sprint([]string{made[1], made[0]}) {
		t.Fatalf("stopped: %s", got)
	}
	var pending page
	e.Do("GET", "/v1/environments?state=pending", apitest.AliceToken, nil).JSON(t, &pending)
	if len(pending.Environments) != 3 {
		t.Fatalf("pending: %v", ids(pending))
	}
	// Bad queries are 400; a cursor of one listing does not work for another.
	for _, q := range []string{"state=bogus", "limit=0", "limit=x", "limit=1000", "cursor=!!!", "cursor=bm90LWpzb24",
		"state=stopped&cursor=" + p1.Next, "sort=asc"} {
		r := e.Do("GET", "/v1/environments?"+q, apitest.AliceToken, nil)
		if r.Status != 400 || r.Code() != "bad_request" {
			t.Errorf("%s: %d %s", q, r.Status, r.Body)
		}
	}
	if r := e.Do("GET", "/v1/environments?cursor="+p1.Next, apitest.CarolToken, nil); r.Status != 400 {
		t.Errorf("acme's cursor used by globex: %d %s", r.Status, r.Body)
	}
}

// setState puts an environment in a node-side state, as a node's report will.
func setState(t *testing.T, e *apitest.Env, id string, st domain.State, node string) {
	t.Helper()
	_, err := e.Store.DB().UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(e.Store.Table()),
		Key:                       map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "ORG#acme"}, "SK": &types.AttributeValueMemberS{Value: "ENV#" + id}},
		UpdateExpression:          aws.String("SET #s = :s, node = :n REMOVE GSI3PK, GSI3SK"),
		ExpressionAttributeNames:  map[string]string{"#s": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: string(st)}, ":n": &types.AttributeValueMemberS{Value: node}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func rawItem(t *testing.T, e *apitest.Env, pk, sk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.Store.DB().GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(e.Store.Table()),
		Key:       map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: pk}, "SK": &types.AttributeValueMemberS{Value: sk}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func attr(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func TestDeleteReleasesQuotaAtOnceAndIsHarmlessTwice(t *testing.T) {
	e := newEnv(t)
	sbx := sandbox(t, e, apitest.AliceToken)
	pend := lease(t, e, apitest.AliceToken, map[string]any{"template": "shell", "sandbox": sbx}).Environment
	ready := lease(t, e, apitest.AliceToken, map[string]any{"template": "shell", "sandbox": sbx}).Environment
	pid, rid := pend["id"].(string), ready["id"].(string)
	if pend["exports"].([]any)[0].(map[string]any)["listen"] == ready["exports"].([]any)[0].(map[string]any)["listen"] {
		t.Fatalf("two live environments of one sandbox share a listen address")
	}
	item := rawItem(t, e, "ORG#acme", "ENV#"+pid)
	if attr(item, "GSI2PK") != e.Store.EnvDuePartition("acme", pid) || !strings.HasPrefix(attr(item, "GSI2SK"), "2026-03-14T09:30:00.000000000Z#acme#") ||
		// shell names platforms: its pending environments are indexed in their class's partition.
		attr(item, "GSI3PK") != "POOL#acme#local#pending#process:linux/amd64,linux/arm64" || attr(item, "GSI1PK") != "ORG#acme#ENV#live" {
		t.Fatalf("index keys of a pending environment: %v", item)
	}
	setState(t, e, rid, domain.StateReady, "node-1")
	if r := e.Do("POST", "/v1/environments", apitest.AliceToken, `{"template":"shell"}`); r.Status != 429 {
		t.Fatalf("third shell: %d", r.Status)
	}

	e.Clock.Advance(time.Minute)
	r := e.Do("DELETE", "/v1/environments/"+pid, apitest.AliceToken, nil)
	got := r.Map(t)
	if r.Status != 200 || got["state"] != "stopped" || got["stopReason"] != "deleted" || mustTime(t, got["stopped"]) != apitest.Start.Add(time.Minute) {
		t.Fatalf("delete pending: %d %s", r.Status, r.Body)
	}
	r = e.Do("DELETE", "/v1/environments/"+rid, apitest.AliceToken, nil)
	if got := r.Map(t); r.Status != 200 || got["state"] != "stopping" || got["node"] != "node-1" {
		t.Fatalf("delete ready: %d %s", r.Status, r.Body)
	}
	// Both released their quota at once, and their listen ports.
	if run, live := running(t, e, "shell"); run != 0 || live != 0 {
		t.Fatalf("after deletes: running %d live %d", run, live)
	}
	port := strings.TrimPrefix(pend["exports"].([]any)[0].(map[string]any)["listen"].(string), "127.0.0.1:")
	if it := rawItem(t, e, "ORG#acme", "SBXPORT#"+sbx+"#"+port); it != nil {
		t.Fatalf("port claim survives the stop: %v", it)
	}
	item = rawItem(t, e, "ORG#acme", "ENV#"+pid)
	if attr(item, "GSI2PK") != "" || attr(item, "GSI3PK") != "" || attr(item, "GSI1PK") != "ORG#acme#ENV#stopped" {
		t.Fatalf("index keys of a stopped environment: %v", item)
	}
	// A second DELETE changes nothing and says so with 200 and the record.
	for _, id := range []string{pid, rid} {
		before := e.Do("GET", "/v1/environments/"+id, apitest.AliceToken, nil)
		again := e.Do("DELETE", "/v1/environments/"+id, apitest.AliceToken, nil)
		if again.Status != 200 || fmt.Sprint(again.Map(t)) != fmt.Sprint(before.Map(t)) {
			t.Fatalf("second delete: %d %s", again.Status, again.Body)
		}
	}
	if run, _ := running(t, e, "shell"); run != 0 {
		t.Fatalf("second delete moved running to %d", run)
	}
	// A stopped environment can still be read.
	if r := e.Do("GET", "/v1/environments/"+pid, apitest.AliceToken, nil); r.Status != 200 || r.Map(t)["state"] != "stopped" {
		t.Fatalf("get stopped: %d %s", r.Status, r.Body)
	}
}

func TestConcurrentDeletesReleaseOnce(t *testing.T) {
	e := newEnv(t)
	id := lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`).Environment["id"].(string)
	lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`)
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := e.Do("DELETE", "/v1/environments/"+id, apitest.AliceToken, nil); r.Status != 200 {
				t.Errorf("delete: %d %s", r.Status, r.Body)
			}
		}()
	}
	wg.Wait()
	if run, live := running(t, e, "sleeper"); run != 1 || live != 1 {
		t.Fatalf("after 10 concurrent deletes of one environment: running %d live %d", run, live)
	}
}

func TestTouch(t *testing.T) {
	e := newEnv(t)
	// sleeper: idle 10m, hard 1h.
	env := lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`).Environment
	id := env["id"].(string)
	touch := func() *apitest.Response {
		return e.Do("POST", "/v1/environments/"+id+"/touch", apitest.AliceToken, nil)
	}
	idleUntil := func(r *apitest.Response) time.Time {
		t.Helper()
		if r.Status != 200 {
			t.Fatalf("touch: %d %s", r.Status, r.Body)
		}
		return mustTime(t, r.Map(t)["idleUntil"])
	}

	e.Clock.Advance(4 * time.Minute)
	if got := idleUntil(touch()); !got.Equal(apitest.Start.Add(14 * time.Minute)) {
		t.Fatalf("touch at +4m: idleUntil %v, want now + idle", got)
	}
	// A touch writes the base item alone: the due index keeps the deadline
	// of the lease, a lower bound of the new one, for the timeout job to move.
	item := rawItem(t, e, "ORG#acme", "ENV#"+id)
	if attr(item, "GSI2SK") != store.DueSK(apitest.Start.Add(10*time.Minute), "acme", id) {
		t.Fatalf("due index moved by a touch: %s", attr(item, "GSI2SK"))
	}
	// Never backwards: a touch whose now + idle is earlier (a clock behind) keeps the deadline.
	e.Clock.Set(apitest.Start.Add(time.Minute))
	if got := idleUntil(touch()); !got.Equal(apitest.Start.Add(14 * time.Minute)) {
		t.Fatalf("touch with an earlier clock moved idleUntil back to %v", got)
	}
	// Never past expires (created + 1h): keep touching within the idle window.
	for at := 10 * time.Minute; at <= 55*time.Minute; at += 9 * time.Minute {
		e.Clock.Set(apitest.Start.Add(at))
		touch()
	}
	e.Clock.Set(apitest.Start.Add(55 * time.Minute))
	if got := idleUntil(touch()); !got.Equal(apitest.Start.Add(time.Hour)) {
		t.Fatalf("touch at +55m: idleUntil %v, want expires", got)
	}
	// Past the deadline the environment is gone, even before the timeout job stops it.
	e.Clock.Set(apitest.Start.Add(time.Hour))
	if r := touch(); r.Status != 410 || r.Code() != "gone" {
		t.Fatalf("touch after expiry: %d %s", r.Status, r.Body)
	}

	// Idle deadline passed without a touch: gone.
	e.Clock.Set(apitest.Start)
	idle := lease(t, e, apitest.AliceToken, `{"template":"sleeper","idle":"1m"}`).Environment["id"].(string)
	e.Clock.Advance(time.Minute)
	if r := e.Do("POST", "/v1/environments/"+idle+"/touch", apitest.AliceToken, nil); r.Status != 410 {
		t.Fatalf("touch after idle deadline: %d %s", r.Status, r.Body)
	}

	// Stopped, stopping and failed environments are gone.
	e.Clock.Set(apitest.Start)
	stopped := lease(t, e, apitest.AliceToken, `{"template":"shell"}`).Environment["id"].(string)
	e.Do("DELETE", "/v1/environments/"+stopped, apitest.AliceToken, nil)
	failed := lease(t, e, apitest.AliceToken, `{"template":"shell"}`).Environment["id"].(string)
	setState(t, e, failed, domain.StateFailed, "node-1")
	for _, gid := range []string{stopped, failed} {
		r := e.Do("POST", "/v1/environments/"+gid+"/touch", apitest.AliceToken, nil)
		if r.Status != 410 || r.Code() != "gone" {
			t.Fatalf("touch %s: %d %s", gid, r.Status, r.Body)
		}
	}
	// The touch takes no body.
	live := lease(t, e, apitest.BobToken, `{"template":"sleeper"}`).Environment["id"].(string)
	if r := e.Do("POST", "/v1/environments/"+live+"/touch", apitest.AliceToken, `{"idle":"1h"}`); r.Status != 400 {
		t.Fatalf("touch with a body: %d %s", r.Status, r.Body)
	}
}

func TestIdempotencyKey(t *testing.T) {
	e := newEnv(t)
	key := http.Header{"Idempotency-Key": {"retry-7f3a"}}
	body := `{"template":"sleeper","labels":{"a":"1","b":"2"}}`
	first := e.DoWith("POST", "/v1/environments", apitest.AliceToken, body, key)
	if first.Status != 201 || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	// The same request (keys reordered, spaced) gets the first response, and nothing new.
	e.Clock.Advance(time.Hour)
	same := e.DoWith("POST", "/v1/environments", apitest.AliceToken, `{ "labels":{"b":"2","a":"1"}, "template":"sleeper" }`, key)
	if same.Status != 201 || string(same.Body) != string(first.Body) || same.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s", same.Status, same.Body)
	}
	if run, live := running(t, e, "sleeper"); run != 1 || live != 1 {
		t.Fatalf("retry leased again: running %d live %d", run, live)
	}
	// Still the first answer when the quota is full by now.
	lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`)
	lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`)
	if r := e.DoWith("POST", "/v1/environments", apitest.AliceToken, body, key); r.Status != 201 || string(r.Body) != string(first.Body) {
		t.Fatalf("retry with a full quota: %d %s", r.Status, r.Body)
	}
	// The same key with another body is refused and leases nothing.
	r := e.DoWith("POST", "/v1/environments", apitest.AliceToken, `{"template":"shell"}`, key)
	if r.Status != 422 || r.Code() != "invalid" || !strings.Contains(string(r.Body), "Idempotency-Key") {
		t.Fatalf("other body: %d %s", r.Status, r.Body)
	}
	if run, _ := running(t, e, "shell"); run != 0 {
		t.Fatalf("other body leased a shell")
	}
	// Keys are per organization: globex's same key is a new lease.
	if r := e.DoWith("POST", "/v1/environments", apitest.CarolToken, `{"template":"shell"}`, key); r.Status != 201 {
		t.Fatalf("globex with the same key: %d %s", r.Status, r.Body)
	}
	// After 24 hours the key is forgotten: a new lease (once quota allows).
	e.Do("DELETE", "/v1/environments/"+first.Map(t)["environment"].(map[string]any)["id"].(string), apitest.AliceToken, nil)
	e.Clock.Advance(24 * time.Hour)
	later := e.DoWith("POST", "/v1/environments", apitest.AliceToken, body, key)
	if later.Status != 201 || later.Header.Get("Idempotent-Replayed") != "" || string(later.Body) == string(first.Body) {
		t.Fatalf("after 24h: %d %s", later.Status, later.Body)
	}
	// A malformed key is a bad request.
	if r := e.DoWith("POST", "/v1/environments", apitest.AliceToken, body, http.Header{"Idempotency-Key": {strings.Repeat("k", 256)}}); r.Status != 400 {
		t.Fatalf("long key: %d", r.Status)
	}
}

func TestConcurrentRetriesWithOneKeyLeaseOnce(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	bodies := make([]string, 10)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.DoWith("POST", "/v1/environments", apitest.AliceToken, `{"template":"sleeper"}`, http.Header{"Idempotency-Key": {"k1"}})
			if r.Status != 201 {
				t.Errorf("%d %s", r.Status, r.Body)
			}
			bodies[i] = string(r.Body)
		}()
	}
	wg.Wait()
	for _, b := range bodies {
		if b != bodies[0] {
			t.Fatalf("different answers for one key")
		}
	}
	if run, live := running(t, e, "sleeper"); run != 1 || live != 1 {
		t.Fatalf("running %d live %d", run, live)
	}
}

func TestLeaseIsAuthReadPlusOneTransaction(t *testing.T) {
	e, counter := newCountedEnv(t)
	e.Do("GET", "/v1/quotas", apitest.AliceToken, nil) // the first use of a token records lastUsed
	lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`)
	counter.Reset()
	lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`)
	if got := counter.Counts(); counter.Total() != 2 || got["BatchGetItem"] != 1 || got["TransactWriteItems"] != 1 {
		t.Fatalf("a lease cost %v", got)
	}
}

// newCountedEnv is a test stack whose every DynamoDB call, authentication
// included, goes through a call counter.
func newCountedEnv(t testing.TB) (*apitest.Env, *store.CallCounter) {
	counter := store.NewCallCounter()
	e := apitest.New(t, nil)
	counted := e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), counter.Option))
	e.Handler = countedHandler(e, counted)
	return e, counter
}

func countedHandler(e *apitest.Env, counted *store.Store) http.Handler {
	return httpapi.New(httpapi.Config{Logger: e.Log, Auth: auth.New(counted, e.Clock, e.Log)}, routes(counted, e.Clock)...)
}

func TestUnavailableTable(t *testing.T) {
	devstack.NeedsMinidyn(t)
	e := newEnv(t)
	lease(t, e, apitest.AliceToken, `{"template":"sleeper"}`)
	e.Dynamo.Server.EmulateFailure(server.FailureConditionInternalServerError)
	r := e.Do("POST", "/v1/environments", apitest.AliceToken, `{"template":"sleeper"}`)
	if r.Status != 503 || r.Code() != "unavailable" || r.Header.Get("Retry-After") == "" || strings.Contains(strings.ToLower(string(r.Body)), "minidyn") {
		t.Fatalf("lease with the table down: %d %s", r.Status, r.Body)
	}
	e.Dynamo.Server.EmulateFailure(server.FailureConditionNone)
	if run, live := running(t, e, "sleeper"); run != 1 || live != 1 {
		t.Fatalf("running %d live %d", run, live)
	}
}

// The moment an Idempotency-Key's 24 hours are over, it is free: a request
// with it then leases anew (the record's expiry is compared the same way by
// the read and by the lease transaction).
func TestIdempotencyKeyIsFreeTheMomentItExpires(t *testing.T) {
	e := newEnv(t)
	key := http.Header{"Idempotency-Key": {"at-the-edge"}}
	first := e.DoWith("POST", "/v1/environments", apitest.AliceToken, `{"template":"sleeper"}`, key)
	if first.Status != 201 {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	e.Clock.Advance(24*time.Hour - time.Millisecond)
	if r := e.DoWith("POST", "/v1/environments", apitest.AliceToken, `{"template":"sleeper"}`, key); r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("just before 24 h: %d %s", r.Status, r.Body)
	}
	e.Clock.Advance(time.Millisecond)
	r := e.DoWith("POST", "/v1/environments", apitest.AliceToken, `{"template":"sleeper"}`, key)
	if r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "" || string(r.Body) == string(first.Body) {
		t.Fatalf("at 24 h: %d %s", r.Status, r.Body)
	}
	if run, live := running(t, e, "sleeper"); run != 2 || live != 2 {
		t.Fatalf("running %d live %d", run, live)
	}
}
