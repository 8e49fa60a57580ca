package fuzz_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/httpapi"
)

// newEnv serves every group over minidyn. Object storage is a closed loopback
// port: presigning is local and works, and the few calls that need S3 get 503,
// which is an answer, not a failure of the service.
func newEnv(f *testing.F) *apitest.Env {
	// Port 1: the kernel never gives it to a listener asking for any port,
	// as it could a port freed here to another test's listener.
	closed := "http://127.0.0.1:1"
	s3c := s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(closed), UsePathStyle: true, RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
	})
	return apitest.New(f, func(e *apitest.Env) [][]httpapi.Route {
		e.Clock.Set(time.Now().UTC())
		return apitest.AllRoutes(e, blob.New(blob.Options{Client: s3c, Bucket: "b", Clock: e.Clock}))
	})
}

// answer fails unless res is an answer the service may give to any input.
func answer(t *testing.T, what string, res *apitest.Response) {
	t.Helper()
	if res.Status >= 500 && res.Status != http.StatusServiceUnavailable {
		t.Fatalf("%s: %d %s", what, res.Status, res.Body)
	}
}

// do runs one request with t as the test of the env, so failures inside the
// fuzz function are reported on t (the env was built with the *testing.F).
func do(e *apitest.Env, t *testing.T, method, path, token string, body any) *apitest.Response {
	e.T = t
	return e.Do(method, path, token, body)
}

// FuzzRequestBodies sends arbitrary bytes as the body of every endpoint that
// reads one: strict decoding, durations (idle, hard, expires), labels, shares,
// sizes and digests all meet the fuzzer through the real handlers.
func FuzzRequestBodies(f *testing.F) {
	seeds := []string{
		`{"template":"shell","labels":{"team":"web"},"idle":"15m","hard":"1h"}`,
		`{"template":"shell","shares":[{"name":"src","localPath":"/x","files":["a/../../b","*.log"]}]}`,
		`{"template":"sleeper","idle":"-1s","hard":"9999999999h"}`,
		`{"template":"shell","labels":{"A":"x","b":"\u0000"}}`,
		`{"name":"laptop","source":"console"}`,
		`{"name":"a","size":3,"sha256":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad","expires":"24h"}`,
		`{"name":"a","size":68719476737,"sha256":"00","parts":["x"]}`,
		`{"expires":"2006-01-02T15:04:05Z"}`,
		`{"joinKey":"els_join_x"}`,
		`{"parts":[{"partNumber":-1,"etag":""}]}`,
		`{"name":1}`, `{"name":"a"} {}`, `[]`, `null`, ``, "{\"name\":\"\xff\"}", `{"size":1e400}`,
	}
	for _, s := range seeds {
		for i := range bodyPaths {
			f.Add(uint8(i), []byte(s))
		}
	}
	e := newEnv(f)
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		p := bodyPaths[int(which)%len(bodyPaths)]
		answer(t, p, do(e, t, http.MethodPost, p, apitest.AliceToken, body))
	})
}

var bodyPaths = []string{
	"/v1/environments", "/v1/tokens", "/v1/keys", "/v1/sandboxes", "/v1/sandboxes/join",
	"/v1/artifacts", "/v1/artifacts/art_x/complete", "/v1/artifacts/art_x/links", "/v1/environments/env_x/touch",
	"/v1/nodes/credentials",
}

// FuzzNodeBodies sends arbitrary bytes as the body of every node-agent call
// (register, heartbeat, claim, report), with a node credential, to a
// registered node that has claimed an environment: never a panic or a 500.
func FuzzNodeBodies(f *testing.F) {
	for _, s := range []string{
		`{"name":"rack-1","address":"10.0.3.7","capacity":8,"agent":"a/1"}`,
		`{"address":"[::1]:80","capacity":-1}`, `{"address":"h","capacity":1e9}`,
		`{"environments":["env_x","../x",""]}`, `{"environments":null}`,
		`{"state":"ready","exports":[{"service":"web","target":"10.0.3.7:0"}]}`,
		`{"state":"ready","restored":{"key":"k","root":"/","files":-1}}`,
		`{"state":"failed","error":"\u0000\u007f"}`, `{"state":"stopped"}`, `{"state":"pending"}`,
		`{}`, `[]`, `null`, ``, "{\"name\":\"\xff\"}",
	} {
		for i := range 4 {
			f.Add(uint8(i), []byte(s))
		}
	}
	e := newEnv(f)
	cred := e.Do(http.MethodPost, "/v1/nodes/credentials", apitest.AliceToken, map[string]any{"pool": "local", "name": "fuzz"})
	var issued struct{ Token string }
	cred.JSON(f, &issued)
	var reg struct{ Node struct{ ID string } }
	e.Do(http.MethodPost, "/v1/nodes", issued.Token, map[string]any{"address": "127.0.0.1", "capacity": 100}).JSON(f, &reg)
	var leased struct{ Environment struct{ ID string } }
	e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "sleeper"}).JSON(f, &leased)
	if r := e.Do(http.MethodPost, "/v1/nodes/"+reg.Node.ID+"/claim?wait=0s", issued.Token, nil); r.Status != 200 {
		f.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	paths := []string{
		"/v1/nodes", "/v1/nodes/" + reg.Node.ID + "/heartbeat", "/v1/nodes/" + reg.Node.ID + "/claim?wait=0s",
		"/v1/nodes/" + reg.Node.ID + "/environments/" + leased.Environment.ID + "/report",
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		p := paths[int(which)%len(paths)]
		answer(t, p, do(e, t, http.MethodPost, p, issued.Token, body))
	})
}

// FuzzUsageSince: any `since` of GET /v1/usage is 200 or 400, never a 500.
func FuzzUsageSince(f *testing.F) {
	for _, s := range []string{"2026-03-01", "", "2026-02-30", "0000-01-01", "9999-12-31", "2026-3-1", "2026-03-01T00:00:00Z", "\x00"} {
		f.Add(s)
	}
	e := newEnv(f)
	f.Fuzz(func(t *testing.T, since string) {
		r := do(e, t, http.MethodGet, "/v1/usage?"+url.Values{"since": {since}}.Encode(), apitest.BobToken, nil)
		if r.Status != 200 && r.Status != 400 {
			t.Fatalf("since %q: %d %s", since, r.Status, r.Body)
		}
	})
}

// FuzzListCursors: any `cursor` of the environments and artifacts listings
// is 200 or 400, never a 500; and a cursor cannot read
// another organization's items.
func FuzzListCursors(f *testing.F) {
	e := newEnv(f)
	// Real cursors, as seeds, from a listing with more than one page.
	for i := 0; i < 3; i++ {
		if r := e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "sleeper"}); r.Status != 201 {
			f.Fatalf("lease: %d %s", r.Status, r.Body)
		}
	}
	var page struct{ Next string }
	e.Do(http.MethodGet, "/v1/environments?limit=1", apitest.BobToken, nil).JSON(f, &page)
	raw, _ := base64.RawURLEncoding.DecodeString(page.Next)
	for _, s := range []string{page.Next, string(raw), "", "e30", "bnVsbA", "!!", "eyJzIjoiMSIsImkiOiIxIn0",
		base64.RawURLEncoding.EncodeToString([]byte(`{"GSI1PK":"ORG#globex#ENV#live","GSI1SK":"x","PK":"ORG#globex","SK":"ENV#x"}`))} {
		f.Add(s, uint8(1))
	}
	f.Fuzz(func(t *testing.T, cursor string, limit uint8) {
		q := url.Values{"limit": {string(rune('0' + limit%10))}}
		q.Set("cursor", cursor)
		r := do(e, t, http.MethodGet, "/v1/environments?"+q.Encode(), apitest.CarolToken, nil)
		if r.Status != 200 && r.Status != 400 {
			t.Fatalf("environments cursor %q: %d %s", cursor, r.Status, r.Body)
		}
		if r.Status == 200 {
			var out struct{ Environments []map[string]any }
			r.JSON(t, &out)
			if len(out.Environments) > 0 {
				t.Fatalf("globex read acme's environments with cursor %q", cursor)
			}
		}
		q = url.Values{"limit": {string(rune('0' + limit%10))}, "cursor": {cursor}}
		r = do(e, t, http.MethodGet, "/v1/artifacts?"+q.Encode(), apitest.BobToken, nil)
		if r.Status != 200 && r.Status != 400 {
			t.Fatalf("artifacts cursor %q: %d %s", cursor, r.Status, r.Body)
		}
	})
}

// FuzzAuthorizationHeader: any Authorization header is 200 (a valid token),
// 401 or 429 (the address blocked after repeated failures), never a 500.
func FuzzAuthorizationHeader(f *testing.F) {
	for _, s := range []string{"Bearer " + apitest.BobToken, "Bearer ", "bearer x", "", "Basic dXNlcjpwYXNz",
		"Bearer els_cli_" + "0123456789012345678901234567890123456789012", "Bearer \xff\xfe0123456789abcdef", "Bearer  a b c d e f g h"} {
		f.Add(s)
	}
	e := newEnv(f)
	f.Fuzz(func(t *testing.T, header string) {
		// A fresh address for each input, so the block after ten failures is
		// exercised without blocking every later input.
		e.RemoteAddr = "192.0.2." + string(rune('1'+len(header)%9)) + ":1234"
		e.T = t
		r := e.DoWith(http.MethodGet, "/v1/quotas", "", nil, http.Header{"Authorization": {header}})
		switch r.Status {
		case 200, 401, 429:
		default:
			t.Fatalf("Authorization %q: %d %s", header, r.Status, r.Body)
		}
	})
}
