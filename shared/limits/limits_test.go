package limits_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/fixture"
	"github.com/envlease/envlease/shared/httpapi"
)

// newEnv serves every endpoint group over the pass's DynamoDB and versitygw.
func newEnv(t *testing.T) *apitest.Env {
	s3s := devstack.NewTestS3(t)
	return apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		// S3 compares presigned requests with real time.
		e.Clock.Set(time.Now().UTC().Truncate(time.Second))
		return apitest.AllRoutes(e, blob.New(blob.Options{Client: s3s.Client(context.Background()), Bucket: s3s.Bucket, Clock: e.Clock}))
	})
}

// noServerError fails the test on any 5xx: an edge is a client's business.
func noServerError(t *testing.T, what string, r *apitest.Response) {
	t.Helper()
	if r.Status >= 500 {
		t.Fatalf("%s: %d %s", what, r.Status, r.Body)
	}
}

// maxLabels is 32 labels, each with the longest key and value allowed.
func maxLabels() map[string]string {
	l := map[string]string{}
	for i := range domain.MaxLabels {
		k := fmt.Sprintf("k%02d", i) + strings.Repeat("x", 60)
		l[k] = strings.Repeat("é", domain.MaxLabelValueLen/2) // 2 bytes each
	}
	return l
}

// files returns n share file names of size bytes each, all different.
func files(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		p := fmt.Sprintf("d/%05d/", i)
		out[i] = p + strings.Repeat("f", size-len(p))
	}
	return out
}

// largestLease is the largest lease request the service takes: every text
// field, label and share file name at its limit.
func largestLease(sandbox string, fileNames []string) map[string]any {
	return map[string]any{
		"template": "shell", "sandbox": sandbox,
		"name": strings.Repeat("n", 100), "project": strings.Repeat("p", 200),
		"labels": maxLabels(),
		"shares": []map[string]any{{"name": "src", "localPath": "/" + strings.Repeat("l", 4095), "files": fileNames}},
	}
}

func register(t *testing.T, e *apitest.Env) string {
	t.Helper()
	r := e.Do(http.MethodPost, "/v1/sandboxes", apitest.BobToken, map[string]any{"name": "laptop"})
	if r.Status != http.StatusCreated {
		t.Fatalf("register sandbox: %d %s", r.Status, r.Body)
	}
	return r.Map(t)["sandbox"].(map[string]any)["id"].(string)
}

// The largest lease is stored and read back, and its idempotent retry gets
// the first answer byte for byte; one byte or one file more is a 422 naming
// the field, with nothing leased.
func TestLargestLeaseIsStored(t *testing.T) {
	for _, tc := range []struct {
		name      string
		n, size   int
		overField string
	}{
		{"longest names", environments.MaxShareFileBytes / 1024, 1024, "shares[0].files"},
		{"most files", environments.MaxShareFiles, environments.MaxShareFileBytes / environments.MaxShareFiles, "shares[0].files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			sbx := register(t, e)
			names := files(tc.n, tc.size)
			key := http.Header{"Idempotency-Key": {strings.Repeat("K", 255)}}
			first := e.DoWith(http.MethodPost, "/v1/environments", apitest.BobToken, largestLease(sbx, names), key)
			if first.Status != http.StatusCreated {
				t.Fatalf("largest lease: %d %s", first.Status, first.Body)
			}
			var got environments.Leased
			first.JSON(t, &got)
			read := e.Do(http.MethodGet, "/v1/environments/"+got.Environment.ID, apitest.BobToken, nil)
			var env domain.Environment
			read.JSON(t, &env)
			if read.Status != 200 || len(env.Shares) != 1 || strings.Join(env.Shares[0].Files, "\n") != strings.Join(names, "\n") || len(env.Labels) != domain.MaxLabels {
				t.Fatalf("read back: %d, %d shares", read.Status, len(env.Shares))
			}
			again := e.DoWith(http.MethodPost, "/v1/environments", apitest.BobToken, largestLease(sbx, names), key)
			if again.Status != http.StatusCreated || string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("replay: %d replayed=%q, same body %v", again.Status, again.Header.Get("Idempotent-Replayed"), string(again.Body) == string(first.Body))
			}

			over := files(tc.n, tc.size)
			if tc.n == environments.MaxShareFiles {
				over = append(over, "one-more")
			} else {
				over[0] += "x"
			}
			r := e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, largestLease(sbx, over))
			if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), tc.overField) {
				t.Fatalf("past the limit: %d %s", r.Status, r.Body)
			}
			q := e.Do(http.MethodGet, "/v1/quotas", apitest.BobToken, nil).Map(t)
			for _, it := range q["quotas"].([]any) {
				if m := it.(map[string]any); m["template"] == "shell" && m["running"].(float64) != 1 {
					t.Fatalf("refused lease changed running: %v", m)
				}
			}
		})
	}
}

// The largest artifact record (every text field and label at its limit, the
// largest size with its part digests) is stored and read back.
func TestLargestArtifactIsStored(t *testing.T) {
	e := newEnv(t)
	parts := make([]string, artifacts.MaxSize/artifacts.DefaultPartSize)
	for i := range parts {
		parts[i] = fmt.Sprintf("%064x", i)
	}
	req := map[string]any{
		"name": strings.Repeat("ü", 255), "project": strings.Repeat("p", 200),
		"contentType": "application/" + strings.Repeat("x", 243), "labels": maxLabels(),
		"size": artifacts.MaxSize, "sha256": strings.Repeat("a", 64), "parts": parts,
	}
	r := e.Do(http.MethodPost, "/v1/artifacts", apitest.BobToken, req)
	if r.Status != http.StatusCreated {
		t.Fatalf("largest artifact: %d %.300s", r.Status, r.Body)
	}
	id := r.Map(t)["artifact"].(map[string]any)["id"].(string)
	got := e.Do(http.MethodGet, "/v1/artifacts/"+id, apitest.BobToken, nil).Map(t)
	if got["name"] != req["name"] || len(got["labels"].(map[string]any)) != domain.MaxLabels {
		t.Fatalf("read back: %v", got["name"])
	}
	// The upload can be renewed: the record with its digests is read and
	// presigned again.
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+id+"/upload", apitest.BobToken, nil); r.Status != http.StatusOK {
		t.Fatalf("renew upload: %d %.300s", r.Status, r.Body)
	}
}

// Identifiers in paths are part of DynamoDB keys (at most 1,024 bytes of sort
// key): one that cannot exist is not found, whatever its length.
func TestLongIdentifiersAreNotFound(t *testing.T) {
	e := newEnv(t)
	node := e.Do(http.MethodPost, "/v1/nodes/credentials", apitest.AliceToken, map[string]any{"pool": "local", "name": "limits"})
	if node.Status != http.StatusCreated {
		t.Fatalf("node credential: %d %s", node.Status, node.Body)
	}
	nodeToken := node.Map(t)["token"].(string)
	for _, id := range []string{strings.Repeat("a", 1100), strings.Repeat("é", 600), "env_" + strings.Repeat("z", 3000)} {
		for _, rt := range []struct{ method, path, token string }{
			{http.MethodGet, "/v1/environments/%s", apitest.BobToken},
			{http.MethodDelete, "/v1/environments/%s", apitest.BobToken},
			{http.MethodPost, "/v1/environments/%s/touch", apitest.BobToken},
			{http.MethodGet, "/v1/artifacts/%s", apitest.BobToken},
			{http.MethodPost, "/v1/artifacts/%s/upload", apitest.BobToken},
			{http.MethodPost, "/v1/artifacts/%s/complete", apitest.BobToken},
			{http.MethodPost, "/v1/artifacts/%s/links", apitest.BobToken},
			{http.MethodDelete, "/v1/keys/%s", apitest.BobToken},
			{http.MethodGet, "/v1/sandboxes/%s", apitest.BobToken},
			{http.MethodDelete, "/v1/nodes/%s", nodeToken},
			{http.MethodPost, "/v1/nodes/%s/heartbeat", nodeToken},
			{http.MethodPost, "/v1/nodes/%s/claim", nodeToken},
			{http.MethodPost, "/v1/nodes/%[1]s/environments/%[1]s/report", nodeToken},
		} {
			path := fmt.Sprintf(rt.path, id)
			var body any
			if rt.method == http.MethodPost {
				body = map[string]any{}
			}
			if strings.HasSuffix(rt.path, "/report") {
				body = map[string]any{"state": "starting"}
			}
			r := e.Do(rt.method, path, rt.token, body)
			noServerError(t, rt.method+" "+rt.path, r)
			if r.Status != http.StatusNotFound {
				t.Errorf("%s %s with a %d-byte id: %d %.200s", rt.method, rt.path, len(id), r.Status, r.Body)
			}
		}
	}
	// The Idempotency-Key is part of a key too: past 255 characters it is a 400.
	r := e.DoWith(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "sleeper"},
		http.Header{"Idempotency-Key": {strings.Repeat("K", 256)}})
	if r.Status != http.StatusBadRequest {
		t.Fatalf("256-character Idempotency-Key: %d %s", r.Status, r.Body)
	}
}

func cursor(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

// A cursor is the client's to send back, so each is checked in full: any
// cursor this listing did not hand out is a 400, never a 5xx and never a page
// of another organization.
func TestEveryCursorIsValidated(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("x", 3000)
	crafted := []string{
		"%%%", "bm90IGpzb24", cursor([]int{1}), cursor(map[string]any{}),
		cursor(map[string]any{"PK": 1, "SK": 2}),
		// environment-cursor shapes
		cursor(map[string]string{"PK": "ORG#globex", "SK": "ENV#env_1", "GSI1PK": "ENVS#acme#live", "GSI1SK": "x"}),
		cursor(map[string]string{"PK": "ORG#acme", "SK": "ENV#" + long, "GSI1PK": "ENVS#acme#live", "GSI1SK": long}),
		cursor(map[string]string{"s": long, "i": long}),
		cursor(map[string]string{"s": "2026#env_1", "i": "env_1", "x": "y"}),
		// artifact-cursor shapes
		cursor(map[string]string{"s": long + "#art_1", "i": "art_1"}),
		cursor(map[string]string{"s": "#" + long, "i": long}),
		cursor(map[string]string{"s": "x#art_1", "i": "art_1"}),
		strings.Repeat("A", 20000),
	}
	for _, list := range []string{"/v1/environments", "/v1/environments?state=stopped", "/v1/artifacts"} {
		for i, c := range crafted {
			sep := "?"
			if strings.Contains(list, "?") {
				sep = "&"
			}
			r := e.Do(http.MethodGet, list+sep+"cursor="+c, apitest.BobToken, nil)
			noServerError(t, fmt.Sprintf("%s cursor %d", list, i), r)
			if r.Status != http.StatusBadRequest || r.Code() != "bad_request" {
				t.Errorf("%s with crafted cursor %d: %d %.200s", list, i, r.Status, r.Body)
			}
		}
	}
}

// The largest transaction the service writes is a stop of an environment with
// the most exports a template may have, held by a sandbox, after months live:
// its usage days fill the transaction to exactly DynamoDB's 100 actions, and
// it commits, with every second counted and every listen port released.
func TestLargestTransactionCommits(t *testing.T) {
	e := newEnv(t)
	tpl := domain.Template{
		Name: "wide", Runtime: "process", Pools: []string{"local"}, Exports: map[string]domain.Export{},
		Timeouts: domain.Timeouts{Idle: domain.Duration(200 * 24 * time.Hour), Hard: domain.Duration(200 * 24 * time.Hour)},
	}
	for i := range domain.MaxTemplateExports {
		tpl.Exports[fmt.Sprintf("svc%02d", i)] = domain.Export{Port: 9000 + i}
	}
	if err := tpl.ValidateLimits(); err != nil {
		t.Fatal(err)
	}
	f := fixture.File{Orgs: []fixture.Org{{ID: "wide", Pools: []string{"local"},
		Users:     []fixture.User{{ID: "wanda", Role: domain.RoleAdmin, Tokens: []string{wideToken}}},
		Templates: []domain.Template{withQuota(tpl, 2)}}}}
	if err := fixture.Apply(context.Background(), e.Store, f, fixture.Options{WithTokens: true, Now: e.Clock.Now()}); err != nil {
		t.Fatal(err)
	}
	sbx := e.Do(http.MethodPost, "/v1/sandboxes", wideToken, map[string]any{"name": "laptop"}).Map(t)["sandbox"].(map[string]any)["id"].(string)
	lease := func() string {
		r := e.Do(http.MethodPost, "/v1/environments", wideToken, map[string]any{"template": "wide", "sandbox": sbx})
		if r.Status != http.StatusCreated {
			t.Fatalf("lease: %d %s", r.Status, r.Body)
		}
		return r.Map(t)["environment"].(map[string]any)["id"].(string)
	}
	id := lease()
	since := e.Clock.Now().Format("2006-01-02")
	const days = 150
	e.Clock.Advance(days * 24 * time.Hour)
	if r := e.Do(http.MethodDelete, "/v1/environments/"+id, wideToken, nil); r.Status != http.StatusOK {
		t.Fatalf("stop after %d days: %d %s", days, r.Status, r.Body)
	}
	// The ports are free again: the next lease may draw any of them.
	lease()
	u := e.Do(http.MethodGet, "/v1/usage?since="+since, wideToken, nil).Map(t)
	var total float64
	for _, it := range u["usage"].([]any) {
		total += it.(map[string]any)["seconds"].(float64)
	}
	if want := float64(days * 24 * 3600); total < want {
		t.Fatalf("usage counted %v seconds, want at least %v", total, want)
	}
}

const wideToken = "els_dev_wanda_0123456789abcdef0123456789abcdef"

func withQuota(t domain.Template, n int) domain.Template {
	t.Quota.MaxLeases = n
	return t
}
