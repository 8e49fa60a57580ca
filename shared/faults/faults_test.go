package faults_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	"github.com/truora/minidyn/server"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/budgets"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/events"
	"github.com/envlease/envlease/shared/federation"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/identity"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/netpolicy"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/openapi"
	"github.com/envlease/envlease/shared/openapi/check"
	"github.com/envlease/envlease/shared/sandboxes"
	"github.com/envlease/envlease/shared/secrets"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/templates"
	"github.com/envlease/envlease/shared/usage"
	"github.com/envlease/envlease/shared/webhooks"
)

// fastRetries keeps the SDK's retry of a failed call (so the path the service
// runs in production is the one tested) but without backoff or a retry
// budget, so hundreds of injected failures take milliseconds. The product
// code is unchanged: these are options of the clients handed to it.
func fastRetries() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = 2
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		o.RateLimiter = ratelimit.None
	})
}

// dynamoFault turns minidyn's failure emulation on at the k-th DynamoDB
// operation the service starts, and keeps it on until cleared: every later
// call of the request fails too, as when the table stops answering midway.
type dynamoFault struct {
	srv *devstack.Minidyn
	mu  sync.Mutex
	n   int // operations started since arm
	k   int // 0: disarmed
}

func (f *dynamoFault) arm(k int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n, f.k = 0, k
}

// disarm clears the failure and reports how many operations were started.
func (f *dynamoFault) disarm() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.srv.EmulateFailure(server.FailureConditionNone)
	n := f.n
	f.n, f.k = 0, 0
	return n
}

func (f *dynamoFault) option(o *dynamodb.Options) {
	o.Retryer = fastRetries()
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("faultAtCall",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				f.mu.Lock()
				if f.k > 0 {
					f.n++
					if f.n == f.k {
						f.srv.EmulateFailure(server.FailureConditionInternalServerError)
					}
				}
				f.mu.Unlock()
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	})
}

// unreachable sends S3 requests to a closed loopback port while down: the
// gateway keeps running (the test's own uploads reach it), but the service's
// client gets connection refused, as when object storage cannot be reached.
type unreachable struct {
	inner  aws.HTTPClient
	closed string
	mu     sync.Mutex
	down   bool
}

func (u *unreachable) set(down bool) {
	u.mu.Lock()
	u.down = down
	u.mu.Unlock()
}

func (u *unreachable) Do(r *http.Request) (*http.Response, error) {
	u.mu.Lock()
	down := u.down
	u.mu.Unlock()
	if down {
		r = r.Clone(r.Context())
		r.URL.Host = u.closed
		r.Host = u.closed
	}
	return u.inner.Do(r)
}

// closedAddr is a loopback address nothing listens on: port 1, which the
// kernel never gives to a listener asking for any port. (A port taken from
// listening on port 0 and closed is free only until another test's
// listener, on a busy machine, is given it.)
const closedAddr = "127.0.0.1:1"

type stack struct {
	*apitest.Env
	fault *dynamoFault
	s3    *unreachable
	s3srv *devstack.S3
	db    *dynamodb.Client // the raw table, without faults, for invariants
	// nodeToken is a node credential of acme's pool "local", for the node
	// agent's own calls.
	nodeToken string
}

// newStack serves every endpoint group over minidyn and versitygw, through
// clients the test can fail.
func newStack(t *testing.T) *stack {
	e := apitest.New(t, nil)
	// S3 compares presigned requests with real time.
	e.Clock.Set(time.Now().UTC().Truncate(time.Second))
	st := &stack{Env: e, fault: &dynamoFault{srv: e.Dynamo.Server}, s3srv: devstack.NewTestS3(t)}
	st.db = e.Dynamo.Client(context.Background())
	e.Store = store.New(dynamodb.New(st.db.Options(), st.fault.option), e.Dynamo.Table)
	e.Store.SetClock(e.Clock)
	e.Auth = auth.New(e.Store, e.Clock, e.Log)

	base := st.s3srv.Client(context.Background())
	st.s3 = &unreachable{inner: base.Options().HTTPClient, closed: closedAddr}
	s3c := s3.New(base.Options(), func(o *s3.Options) {
		o.HTTPClient = st.s3
		o.Retryer = fastRetries()
	})
	blobs := blob.New(blob.Options{Client: s3c, Bucket: st.s3srv.Bucket, Clock: e.Clock})
	keySvc := keys.NewService(e.Store, e.Clock)
	tplSvc := templates.NewService(e.Store)
	// Nodes keep logs and checkpoints as artifacts (and sign snapshot links) through it.
	artSvc := artifacts.NewService(e.Store, blobs, e.Clock, artifacts.Options{PartSize: blob.MinPartSize})
	// No template cache: every lease reads its template, one more call to fail.
	envSvc := environments.NewService(e.Store, e.Clock, environments.WithTemplateTTL(0), environments.WithLinks(artSvc))
	nodeSvc := nodes.NewService(e.Store, artSvc, e.Clock, nodes.Options{Secrets: apitest.NewSecrets(e)})
	e.Handler = httpapi.New(httpapi.Config{Logger: e.Log, Auth: e.Auth},
		keys.TokenRoutes(keySvc), keys.KeyRoutes(keySvc),
		sandboxes.Routes(sandboxes.NewService(e.Store, e.Clock)),
		environments.Routes(envSvc),
		templates.Routes(tplSvc), templates.QuotaRoutes(tplSvc),
		artifacts.Routes(artSvc),
		usage.Routes(usage.NewService(e.Store, e.Clock)),
		budgets.Routes(budgets.NewService(e.Store, e.Clock)),
		// The admin's node operations and the node agent's own calls.
		nodes.Routes(nodeSvc),
		events.Routes(events.NewService(e.Store, e.Clock)),
		webhooks.Routes(webhooks.NewService(e.Store, e.Clock, webhooks.Guard{})),
		federation.Routes(apitest.NewFederation(e)),
		identity.Routes(identity.NewService(identity.NewIssuer(apitest.IssuerURL, identity.NewLocal(e.Store, e.Clock), e.Clock), nodeSvc, envSvc)),
		secrets.Routes(apitest.NewSecrets(e)),
		openapi.Routes(),
	)
	// lastUsed is written at most once a minute per key, and a failure of that
	// best-effort write does not fail the request; write it now, so the runs
	// below see each request's own calls only.
	for _, tok := range []string{apitest.AliceToken, apitest.BobToken} {
		st.must(http.MethodGet, "/v1/quotas", tok, nil, 200)
	}
	// A template behind a network boundary with rules, for the network
	// routes (the shared fixture has none).
	if err := e.Store.PutTemplate(context.Background(), "acme", domain.Template{
		Name: "netbox", Command: []string{"sleep", "3600"}, Runtime: domain.RuntimeProcess, Pools: []string{"local"},
		Timeouts: domain.Timeouts{Idle: domain.Duration(30 * time.Minute), Hard: domain.Duration(6 * time.Hour)}, Quota: domain.Quota{MaxLeases: 100},
		Network:      domain.NetworkRules,
		NetworkRules: &netpolicy.Rules{Allow: []string{"example.com"}},
	}.Normalized()); err != nil {
		t.Fatal(err)
	}
	// A template with an identity, for the identity routes.
	if err := e.Store.PutTemplate(context.Background(), "acme", domain.Template{
		Name: "idbox", Command: []string{"sleep", "3600"}, Runtime: domain.RuntimeProcess, Pools: []string{"local"},
		Timeouts: domain.Timeouts{Idle: domain.Duration(30 * time.Minute), Hard: domain.Duration(6 * time.Hour)}, Quota: domain.Quota{MaxLeases: 100},
		Identity: &domain.TemplateIdentity{Audiences: []string{domain.AWSAudience}},
	}.Normalized()); err != nil {
		t.Fatal(err)
	}
	st.nodeToken = st.must(http.MethodPost, "/v1/nodes/credentials", apitest.AliceToken,
		map[string]any{"pool": "local", "name": "faults"}, 201)["token"].(string)
	st.register() // the same for the node credential's lastUsed
	return st
}

// register registers a new node of acme's pool "local" and returns its id.
// Each endpoint round gets a fresh node, so no node fills its capacity.
func (s *stack) register() string {
	s.T.Helper()
	out := s.must(http.MethodPost, "/v1/nodes", s.nodeToken, registerBody, 201)
	return out["node"].(map[string]any)["id"].(string)
}

var registerBody = map[string]any{"name": "faults", "address": "127.0.0.1", "capacity": 2}

// leaseSleeper leases an environment of "sleeper" (no sandbox, no exports),
// which a node of pool "local" can claim.
func (s *stack) leaseSleeper() string {
	s.T.Helper()
	out := s.must(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "sleeper"}, 201)
	return out["environment"].(map[string]any)["id"].(string)
}

// claimed returns a fresh node and the environment it has just claimed (starting).
func (s *stack) claimed() (node, env string) {
	s.T.Helper()
	node, env = s.register(), s.leaseSleeper()
	out := s.must(http.MethodPost, "/v1/nodes/"+node+"/claim?wait=0s", s.nodeToken, nil, 200)
	if got := out["environment"].(map[string]any)["id"]; got != env {
		s.T.Fatalf("node %s claimed %v, want %s", node, got, env)
	}
	return node, env
}

type request struct {
	method, path, token string
	body                any
	header              http.Header
}

func (s *stack) send(r request) *apitest.Response {
	s.T.Helper()
	return s.DoWith(r.method, r.path, r.token, r.body, r.header)
}

func (s *stack) must(method, path, token string, body any, status int) map[string]any {
	s.T.Helper()
	res := s.Do(method, path, token, body)
	if res.Status != status {
		s.T.Fatalf("%s %s: %d %s", method, path, res.Status, res.Body)
	}
	if len(res.Body) == 0 {
		return nil
	}
	return res.Map(s.T)
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// artifact creates one small artifact and uploads its bytes; sealed says
// whether to complete it too.
func (s *stack) artifact(sealed bool) string {
	s.T.Helper()
	data := []byte(fmt.Sprintf("artifact %d", time.Now().UnixNano()))
	out := s.must(http.MethodPost, "/v1/artifacts", apitest.BobToken,
		map[string]any{"name": "out.txt", "size": len(data), "sha256": digest(data)}, 201)
	part := out["upload"].(map[string]any)["parts"].([]any)[0].(map[string]any)
	req, _ := http.NewRequest(http.MethodPut, part["url"].(string), bytes.NewReader(data))
	for k, v := range part["headers"].(map[string]any) {
		req.Header.Set(k, v.(string))
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.T.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		s.T.Fatalf("upload: %d", res.StatusCode)
	}
	id := out["artifact"].(map[string]any)["id"].(string)
	if sealed {
		s.must(http.MethodPost, "/v1/artifacts/"+id+"/complete", apitest.BobToken, nil, 200)
	}
	return id
}

// webhook creates a webhook of acme (a public literal address: nothing is
// resolved, and no job runs here to deliver).
func (s *stack) webhook() string {
	s.T.Helper()
	out := s.must(http.MethodPost, "/v1/webhooks", apitest.AliceToken,
		map[string]any{"url": "https://93.184.216.34/hook", "types": []string{"*"}}, 201)
	return out["webhook"].(map[string]any)["id"].(string)
}

// failedDelivery gives a webhook a delivery that has failed, as the
// delivery job leaves one: an event of the outbox fanned out to it.
func (s *stack) failedDelivery(hook string) string {
	s.T.Helper()
	ctx := context.Background()
	now := s.Clock.Now()
	ev := domain.NewEvent(ctx, domain.EventQuotaRefused, "acme", domain.Subject{Kind: "template", ID: "shell"}, now,
		map[string]any{"template": "shell", "limit": 2, "running": 2})
	if err := s.Store.PutEvent(ctx, ev); err != nil {
		s.T.Fatal(err)
	}
	d := domain.Delivery{ID: store.DeliveryID(ev.ID), Webhook: hook, Event: ev.ID, Type: ev.Type, State: domain.DeliveryFailed,
		Created: now, Attempts: []domain.Attempt{{At: now, StatusCode: 500}}, LastCode: 500, OrgID: "acme", Body: []byte(`{}`)}
	if ok, err := s.Store.FanOut(ctx, ev, []domain.Delivery{d}); err != nil || !ok {
		s.T.Fatalf("fan out: %v %v", ok, err)
	}
	return d.ID
}

func (s *stack) sandbox() (id, joinKey string) {
	s.T.Helper()
	out := s.must(http.MethodPost, "/v1/sandboxes", apitest.BobToken, map[string]any{"name": "laptop"}, 201)
	return out["sandbox"].(map[string]any)["id"].(string), out["joinKey"].(string)
}

func (s *stack) lease(sandbox string) string {
	s.T.Helper()
	out := s.must(http.MethodPost, "/v1/environments", apitest.BobToken, leaseBody(sandbox), 201)
	return out["environment"].(map[string]any)["id"].(string)
}

func leaseBody(sandbox string) map[string]any {
	return map[string]any{"template": "shell", "sandbox": sandbox, "labels": map[string]string{"team": "web"},
		"shares": []map[string]any{{"name": "src", "localPath": "/home/bob/src", "files": []string{"main.go"}}}}
}

// endpoint is one operation: prepare builds a request that will succeed
// (with the dependency up), status is its success status, and cleanup undoes
// what the successful request did, so every round starts from the same state.
type endpoint struct {
	name    string
	prepare func(s *stack) request
	status  int
	cleanup func(s *stack, res *apitest.Response)
	// retried, when set, judges the retry after a fault instead of status:
	// for a request whose write may have committed before the fault.
	retried func(s *stack, res *apitest.Response)
}

// deleteLeased deletes the environment of a lease's answer ({environment, config}).
func deleteLeased(s *stack, res *apitest.Response) {
	id := res.Map(s.T)["environment"].(map[string]any)["id"].(string)
	s.must(http.MethodDelete, "/v1/environments/"+id, apitest.BobToken, nil, 200)
}

// deleteEnvironment deletes the environment an answer is (GET and touch of
// one environment return the environment itself).
func deleteEnvironment(s *stack, res *apitest.Response) {
	id := res.Map(s.T)["id"].(string)
	s.must(http.MethodDelete, "/v1/environments/"+id, apitest.BobToken, nil, 200)
}

func endpoints(sbx string, key string) []endpoint {
	get := func(path string) func(*stack) request {
		return func(*stack) request { return request{method: http.MethodGet, path: path, token: apitest.BobToken} }
	}
	return append([]endpoint{
		{name: "POST /v1/tokens", status: 201, prepare: func(*stack) request {
			return request{method: "POST", path: "/v1/tokens", token: apitest.BobToken, body: map[string]any{"name": "laptop"}}
		}},
		{name: "POST /v1/keys", status: 201, prepare: func(*stack) request {
			return request{method: "POST", path: "/v1/keys", token: apitest.AliceToken, body: map[string]any{"name": "ci"}}
		}},
		{name: "POST /v1/console/codes", status: 201, prepare: func(*stack) request {
			return request{method: "POST", path: "/v1/console/codes", token: apitest.BobToken}
		}},
		{name: "POST /v1/console/sessions", status: 201, prepare: func(s *stack) request {
			code := s.must("POST", "/v1/console/codes", apitest.BobToken, nil, 201)["code"].(string)
			return request{method: "POST", path: "/v1/console/sessions", body: map[string]any{"code": code}}
		}},
		{name: "GET /v1/keys", status: 200, prepare: get("/v1/keys")},
		{name: "GET /v1/whoami", status: 200, prepare: get("/v1/whoami")},
		{name: "DELETE /v1/keys/{id}", status: 200, prepare: func(s *stack) request {
			id := s.must("POST", "/v1/tokens", apitest.BobToken, map[string]any{"name": "old"}, 201)["apiKey"].(map[string]any)["id"].(string)
			return request{method: "DELETE", path: "/v1/keys/" + id, token: apitest.BobToken}
		}},
		{name: "POST /v1/sandboxes", status: 201, prepare: func(*stack) request {
			return request{method: "POST", path: "/v1/sandboxes", token: apitest.BobToken, body: map[string]any{"name": "ci-runner"}}
		}},
		{name: "GET /v1/sandboxes", status: 200, prepare: get("/v1/sandboxes")},
		{name: "GET /v1/sandboxes/{id}", status: 200, prepare: get("/v1/sandboxes/" + sbx)},
		{name: "POST /v1/sandboxes/join", status: 200, prepare: func(s *stack) request {
			_, jk := s.sandbox()
			return request{method: "POST", path: "/v1/sandboxes/join", token: apitest.BobToken, body: map[string]any{"joinKey": jk}}
		}},
		{name: "POST /v1/environments", status: 201, cleanup: deleteLeased, prepare: func(*stack) request {
			return request{method: "POST", path: "/v1/environments", token: apitest.BobToken, body: leaseBody(sbx)}
		}},
		{name: "POST /v1/environments (Idempotency-Key)", status: 201, cleanup: deleteLeased, prepare: func(*stack) request {
			return request{method: "POST", path: "/v1/environments", token: apitest.BobToken, body: leaseBody(sbx),
				header: http.Header{"Idempotency-Key": {fmt.Sprintf("k-%d", time.Now().UnixNano())}}}
		}},
		{name: "GET /v1/environments", status: 200, prepare: get("/v1/environments")},
		{name: "GET /v1/environments/{id}", status: 200, cleanup: deleteEnvironment, prepare: func(s *stack) request {
			return request{method: "GET", path: "/v1/environments/" + s.lease(sbx), token: apitest.BobToken}
		}},
		{name: "DELETE /v1/environments/{id}", status: 200, prepare: func(s *stack) request {
			return request{method: "DELETE", path: "/v1/environments/" + s.lease(sbx), token: apitest.BobToken}
		}},
		{name: "POST /v1/environments/{id}/touch", status: 200, cleanup: deleteEnvironment, prepare: func(s *stack) request {
			id := s.lease(sbx)
			s.Clock.Advance(time.Second) // so the touch has a deadline to move
			return request{method: "POST", path: "/v1/environments/" + id + "/touch", token: apitest.BobToken}
		}},
		// A live environment is answered as it is (one read); the pause and
		// resume transactions are run by shared/timeouts' pause tests.
		{name: "POST /v1/environments/{id}/wake", status: 200, cleanup: deleteEnvironment, prepare: func(s *stack) request {
			return request{method: "POST", path: "/v1/environments/" + s.lease(sbx) + "/wake", token: apitest.BobToken}
		}},
		{name: "GET /v1/templates", status: 200, prepare: get("/v1/templates")},
		{name: "GET /v1/usage", status: 200, prepare: get("/v1/usage")},
		{name: "GET /v1/usage (by template)", status: 200, prepare: get("/v1/usage?by=template&filter=template=shell")},
		{name: "GET /v1/usage/settings", status: 200, prepare: get("/v1/usage/settings")},
		{name: "GET /v1/budgets", status: 200, prepare: get("/v1/budgets")},
		{name: "PUT /v1/budgets/{id}", status: 200, prepare: func(*stack) request {
			return request{method: "PUT", path: "/v1/budgets/all", token: apitest.AliceToken,
				body: map[string]any{"scope": "org", "period": "month", "seconds": 100000000}}
		}},
		{name: "DELETE /v1/budgets/{id}", status: 204, prepare: func(s *stack) request {
			s.must("PUT", "/v1/budgets/gone", apitest.AliceToken, map[string]any{"scope": "org", "period": "day", "seconds": 100000000}, 200)
			return request{method: "DELETE", path: "/v1/budgets/gone", token: apitest.AliceToken}
		}, retried: func(s *stack, res *apitest.Response) {
			// The delete may have committed before the fault: then it is gone.
			if res.Status != 204 && res.Status != 404 {
				s.T.Fatalf("retried delete: %d %s", res.Status, res.Body)
			}
		}},
		{name: "PUT /v1/usage/settings", status: 200, prepare: func(*stack) request {
			return request{method: "PUT", path: "/v1/usage/settings", token: apitest.AliceToken,
				body: map[string]any{"groupings": []string{"project"}, "currency": "EUR", "rates": map[string]any{"shell": []map[string]any{{"from": "2026-03-01", "perHour": 0.5}}}}}
		}},
		{name: "POST /v1/nodes/credentials", status: 201, prepare: func(*stack) request {
			return request{method: "POST", path: "/v1/nodes/credentials", token: apitest.AliceToken, body: map[string]any{"pool": "local", "name": "n1"}}
		}},
		{name: "GET /v1/nodes", status: 200, prepare: func(*stack) request {
			return request{method: "GET", path: "/v1/nodes", token: apitest.AliceToken}
		}},
		{name: "GET /v1/quotas", status: 200, prepare: get("/v1/quotas")},
		{name: "POST /v1/nodes", status: 201, prepare: func(s *stack) request {
			return request{method: "POST", path: "/v1/nodes", token: s.nodeToken, body: registerBody}
		}},
		{name: "POST /v1/nodes/{id}/heartbeat", status: 200, prepare: func(s *stack) request {
			node, _ := s.claimed()
			return request{method: "POST", path: "/v1/nodes/" + node + "/heartbeat", token: s.nodeToken, body: map[string]any{"environments": []string{}}}
		}, cleanup: deleteHeartbeatEnvs},
		claimEndpoint(),
		tunnelEndpoint(),
		execEndpoint(),
		filesEndpoint(),
		keepLogEndpoint(),
		completeLogEndpoint(),
		logsEndpoint(),
		metricsEndpoint(),
		recentMetricsEndpoint(),
		{name: "POST /v1/nodes/{id}/environments/{env}/report (ready)", status: 200, cleanup: deleteReported, prepare: func(s *stack) request {
			node, env := s.claimed()
			return request{method: "POST", path: "/v1/nodes/" + node + "/environments/" + env + "/report", token: s.nodeToken, body: map[string]any{"state": "ready"}}
		}},
		{name: "POST /v1/nodes/{id}/environments/{env}/report (stopped)", status: 200, prepare: func(s *stack) request {
			node, env := s.claimed()
			return request{method: "POST", path: "/v1/nodes/" + node + "/environments/" + env + "/report", token: s.nodeToken, body: map[string]any{"state": "stopped"}}
		}},
		{name: "DELETE /v1/nodes/{id}", status: 200, prepare: func(s *stack) request {
			node, _ := s.claimed() // deregistering fails what it runs
			return request{method: "DELETE", path: "/v1/nodes/" + node, token: s.nodeToken}
		}},
		{name: "POST /v1/artifacts", status: 201, prepare: func(*stack) request {
			return request{method: "POST", path: "/v1/artifacts", token: apitest.BobToken,
				body: map[string]any{"name": "a.txt", "size": 3, "sha256": digest([]byte("abc"))}}
		}},
		{name: "POST /v1/artifacts (multipart)", status: 201, prepare: func(*stack) request { return multipartCreate() }},
		{name: "GET /v1/artifacts", status: 200, prepare: get("/v1/artifacts")},
		{name: "GET /v1/artifacts/{id}", status: 200, prepare: func(s *stack) request {
			return request{method: "GET", path: "/v1/artifacts/" + s.artifact(true), token: apitest.BobToken}
		}},
		{name: "POST /v1/artifacts/{id}/upload", status: 200, prepare: func(s *stack) request {
			return request{method: "POST", path: "/v1/artifacts/" + s.artifact(false) + "/upload", token: apitest.BobToken}
		}},
		{name: "POST /v1/artifacts/{id}/upload (multipart)", status: 200, prepare: func(s *stack) request {
			id := s.must(http.MethodPost, "/v1/artifacts", apitest.BobToken, multipartCreate().body, 201)["artifact"].(map[string]any)["id"].(string)
			return request{method: "POST", path: "/v1/artifacts/" + id + "/upload", token: apitest.BobToken}
		}},
		{name: "POST /v1/artifacts/{id}/complete", status: 200, prepare: func(s *stack) request {
			return request{method: "POST", path: "/v1/artifacts/" + s.artifact(false) + "/complete", token: apitest.BobToken}
		}},
		{name: "GET /v1/events", status: 200, prepare: get("/v1/events?type=environment.&limit=5")},
		{name: "GET /v1/events (subject)", status: 200, prepare: get("/v1/events?subject=template/shell")},
		{name: "POST /v1/webhooks", status: 201, prepare: func(*stack) request {
			return request{method: "POST", path: "/v1/webhooks", token: apitest.AliceToken,
				body: map[string]any{"url": "https://93.184.216.34/hook", "types": []string{"environment."}}}
		}, cleanup: func(s *stack, res *apitest.Response) {
			id := res.Map(s.T)["webhook"].(map[string]any)["id"].(string)
			s.must(http.MethodDelete, "/v1/webhooks/"+id, apitest.AliceToken, nil, 204)
		}},
		{name: "GET /v1/webhooks", status: 200, prepare: func(*stack) request {
			return request{method: "GET", path: "/v1/webhooks", token: apitest.AliceToken}
		}},
		{name: "DELETE /v1/webhooks/{id}", status: 204, prepare: func(s *stack) request {
			return request{method: "DELETE", path: "/v1/webhooks/" + s.webhook(), token: apitest.AliceToken}
		}, retried: func(s *stack, res *apitest.Response) {
			// The delete may have happened before the fault: then it is gone.
			if res.Status != 204 && res.Status != 404 {
				s.T.Fatalf("delete after the fault cleared: %d %s", res.Status, res.Body)
			}
		}},
		{name: "GET /v1/webhooks/{id}/deliveries", status: 200, prepare: func(s *stack) request {
			hook := s.webhook()
			s.failedDelivery(hook)
			return request{method: "GET", path: "/v1/webhooks/" + hook + "/deliveries", token: apitest.AliceToken}
		}, cleanup: func(s *stack, res *apitest.Response) {
			d := res.Map(s.T)["deliveries"].([]any)[0].(map[string]any)
			s.must(http.MethodDelete, "/v1/webhooks/"+d["webhook"].(string), apitest.AliceToken, nil, 204)
		}},
		{name: "POST /v1/webhooks/{id}/deliveries/{delivery}/retry", status: 200, prepare: func(s *stack) request {
			hook := s.webhook()
			return request{method: "POST", path: "/v1/webhooks/" + hook + "/deliveries/" + s.failedDelivery(hook) + "/retry", token: apitest.AliceToken}
		}, cleanup: func(s *stack, res *apitest.Response) {
			d := res.Map(s.T)["delivery"].(map[string]any)
			s.must(http.MethodDelete, "/v1/webhooks/"+d["webhook"].(string), apitest.AliceToken, nil, 204)
		}},
		{name: "POST /v1/artifacts/{id}/links", status: 200, prepare: func(s *stack) request {
			return request{method: "POST", path: "/v1/artifacts/" + s.artifact(true) + "/links", token: apitest.BobToken,
				body: map[string]any{"expires": "1h"}}
		}},
	}, append(append(append(issuerEndpoints(), checkpointEndpoints()...), networkAndPreviewEndpoints()...), identityEndpoints()...)...)
}

// deleteReported deletes the environment of a report's answer ({environment}).
func deleteReported(s *stack, res *apitest.Response) { deleteLeased(s, res) }

// deleteHeartbeatEnvs deletes what the heartbeat's node runs.
func deleteHeartbeatEnvs(s *stack, res *apitest.Response) {
	for _, e := range res.Map(s.T)["environments"].([]any) {
		s.must(http.MethodDelete, "/v1/environments/"+e.(map[string]any)["id"].(string), apitest.BobToken, nil, 200)
	}
}

// readyOnEndpoint leases an environment of template, claimed by a new node
// that serves an endpoint (on the loopback, so it serves previews too) and
// reported ready with the web export.
func (s *stack) readyOnEndpoint(template string) (node, env string) {
	s.T.Helper()
	body := map[string]any{"tunnelURL": "ws://127.0.0.1:1/tunnel"}
	for k, v := range registerBody {
		body[k] = v
	}
	node = s.must(http.MethodPost, "/v1/nodes", s.nodeToken, body, 201)["node"].(map[string]any)["id"].(string)
	env = s.must(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": template}, 201)["environment"].(map[string]any)["id"].(string)
	if got := s.must(http.MethodPost, "/v1/nodes/"+node+"/claim?wait=0s", s.nodeToken, nil, 200)["environment"].(map[string]any)["id"]; got != env {
		s.T.Fatalf("node %s claimed %v, want %s", node, got, env)
	}
	report := map[string]any{"state": "ready"}
	if template == "shell" {
		report["exports"] = []map[string]any{{"service": "web", "target": "127.0.0.1:8080"}}
	}
	s.must(http.MethodPost, "/v1/nodes/"+node+"/environments/"+env+"/report", s.nodeToken, report, 200)
	return node, env
}

// networkAndPreviewEndpoints are the routes of a ready environment's
// network rules, network log and refusals, and its preview links. Each
// prepares an environment of its own and deletes it afterwards.
func networkAndPreviewEndpoints() []endpoint {
	var env string
	deleteEnv := func(s *stack, _ *apitest.Response) {
		s.must(http.MethodDelete, "/v1/environments/"+env, apitest.BobToken, nil, 200)
	}
	preview := func(s *stack) string {
		return s.must(http.MethodPost, "/v1/environments/"+env+"/previews", apitest.BobToken, map[string]any{"export": "web"}, 201)["id"].(string)
	}
	return []endpoint{
		{name: "PATCH /v1/environments/{id}/network", status: 200, cleanup: deleteEnv, prepare: func(s *stack) request {
			_, env = s.readyOnEndpoint("netbox")
			return request{method: http.MethodPatch, path: "/v1/environments/" + env + "/network", token: apitest.BobToken,
				body: map[string]any{"deny": []string{"*.example.com"}}}
		}},
		{name: "GET /v1/environments/{id}/network-log", status: 200, cleanup: deleteEnv, prepare: func(s *stack) request {
			_, env = s.readyOnEndpoint("netbox")
			return request{method: http.MethodGet, path: "/v1/environments/" + env + "/network-log", token: apitest.BobToken}
		}},
		{name: "POST /v1/nodes/{id}/environments/{env}/network-refused", status: 204, cleanup: deleteEnv, prepare: func(s *stack) request {
			var node string
			node, env = s.readyOnEndpoint("netbox")
			return request{method: http.MethodPost, path: "/v1/nodes/" + node + "/environments/" + env + "/network-refused", token: s.nodeToken,
				body: map[string]any{"count": 1, "refusals": []map[string]any{{"time": "2026-03-14T09:05:01Z", "proto": "tcp", "addr": "203.0.113.9", "port": 443, "rule": "no allow entry"}}}}
		}},
		// A set is one transaction (the sealed item and its event) after
		// two reads; a retry sets it again, a second secret.set.
		{name: "PUT /v1/secrets/{name}", status: 200, prepare: func(*stack) request {
			return request{method: http.MethodPut, path: "/v1/secrets/FAULT_TOKEN", token: apitest.AliceToken, body: map[string]any{"value": "s3cr3t-value"}}
		}},
		{name: "GET /v1/secrets", status: 200, prepare: func(s *stack) request {
			s.must(http.MethodPut, "/v1/secrets/LISTED", apitest.AliceToken, map[string]any{"value": "v"}, 200)
			return request{method: http.MethodGet, path: "/v1/secrets", token: apitest.BobToken}
		}},
		{name: "GET /v1/secrets/{name}", status: 200, prepare: func(s *stack) request {
			s.must(http.MethodPut, "/v1/secrets/SHOWN", apitest.AliceToken, map[string]any{"value": "v"}, 200)
			return request{method: http.MethodGet, path: "/v1/secrets/SHOWN", token: apitest.BobToken}
		}},
		{name: "DELETE /v1/secrets/{name}", status: 204, prepare: func(s *stack) request {
			s.must(http.MethodPut, "/v1/secrets/GONE", apitest.AliceToken, map[string]any{"value": "v"}, 200)
			return request{method: http.MethodDelete, path: "/v1/secrets/GONE", token: apitest.AliceToken}
		}, retried: func(s *stack, res *apitest.Response) {
			if res.Status != 204 && res.Status != 404 {
				s.T.Fatalf("retried delete: %d %s", res.Status, res.Body)
			}
		}},
		{name: "GET /v1/nodes/{id}/environments/{env}/secrets", status: 200, cleanup: deleteEnv, prepare: func(s *stack) request {
			var node string
			node, env = s.readyOnEndpoint("netbox")
			return request{method: http.MethodGet, path: "/v1/nodes/" + node + "/environments/" + env + "/secrets", token: s.nodeToken}
		}},
		{name: "POST /v1/environments/{id}/previews", status: 201, cleanup: deleteEnv, prepare: func(s *stack) request {
			_, env = s.readyOnEndpoint("shell")
			return request{method: http.MethodPost, path: "/v1/environments/" + env + "/previews", token: apitest.BobToken, body: map[string]any{"export": "web"}}
		}},
		{name: "GET /v1/environments/{id}/previews", status: 200, cleanup: deleteEnv, prepare: func(s *stack) request {
			_, env = s.readyOnEndpoint("shell")
			preview(s)
			return request{method: http.MethodGet, path: "/v1/environments/" + env + "/previews", token: apitest.BobToken}
		}},
		{name: "DELETE /v1/environments/{id}/previews/{preview}", status: 204, cleanup: deleteEnv, prepare: func(s *stack) request {
			_, env = s.readyOnEndpoint("shell")
			return request{method: http.MethodDelete, path: "/v1/environments/" + env + "/previews/" + preview(s), token: apitest.BobToken}
		}},
		{name: "POST /v1/nodes/{id}/environments/{env}/previews/{preview}/route", status: 200, cleanup: deleteEnv, prepare: func(s *stack) request {
			var node string
			node, env = s.readyOnEndpoint("shell")
			made := s.must(http.MethodPost, "/v1/environments/"+env+"/previews", apitest.BobToken, map[string]any{"export": "web"}, 201)
			u, err := url.Parse(made["url"].(string))
			if err != nil {
				s.T.Fatal(err)
			}
			return request{method: http.MethodPost, path: "/v1/nodes/" + node + "/environments/" + env + "/previews/" + made["id"].(string) + "/route",
				token: s.nodeToken, body: map[string]any{"token": u.Query().Get("envlease_preview")}}
		}},
	}
}

// tunnelEndpoint asks for a tunnel to a ready environment with an export, on
// a node that serves tunnels; it reads and writes nothing else, so a retry
// after a fault is the same request.
func tunnelEndpoint() endpoint {
	var env string
	return endpoint{
		name: "POST /v1/environments/{id}/tunnel", status: 200,
		prepare: func(s *stack) request {
			_, env = s.readyOnEndpoint("shell")
			return request{method: http.MethodPost, path: "/v1/environments/" + env + "/tunnel", token: apitest.BobToken}
		},
		cleanup: func(s *stack, _ *apitest.Response) {
			s.must(http.MethodDelete, "/v1/environments/"+env, apitest.BobToken, nil, 200)
		},
	}
}

// claimEndpoint is a node's claim of a pending environment. A fault after
// the claim's write leaves the environment claimed (starting on the node,
// which learns it from its next heartbeat), so the retry may find nothing
// pending: 204. Either way the environment is the node's, never lost or
// claimed twice, and it is deleted after each round.
func claimEndpoint() endpoint {
	var node, env string
	return endpoint{
		name: "POST /v1/nodes/{id}/claim", status: 200,
		prepare: func(s *stack) request {
			node, env = s.register(), s.leaseSleeper()
			return request{method: "POST", path: "/v1/nodes/" + node + "/claim?wait=0s", token: s.nodeToken}
		},
		retried: func(s *stack, res *apitest.Response) {
			switch res.Status {
			case 200:
			case 204:
				beat := s.must(http.MethodPost, "/v1/nodes/"+node+"/heartbeat", s.nodeToken, nil, 200)
				runs := beat["environments"].([]any)
				if len(runs) != 1 || runs[0].(map[string]any)["id"] != env || runs[0].(map[string]any)["state"] != "starting" {
					s.T.Fatalf("claim retried with 204 but node %s runs %v, want %s starting", node, runs, env)
				}
			default:
				s.T.Fatalf("claim after the fault cleared: %d %s", res.Status, res.Body)
			}
		},
		cleanup: func(s *stack, _ *apitest.Response) {
			s.must(http.MethodDelete, "/v1/environments/"+env, apitest.BobToken, nil, 200)
		},
	}
}

func multipartCreate() request {
	size := blob.MinPartSize + 1
	return request{method: "POST", path: "/v1/artifacts", token: apitest.BobToken, body: map[string]any{
		"name": "big.bin", "size": size, "sha256": digest([]byte("whole")),
		"parts": []string{digest([]byte("part 1")), digest([]byte("part 2"))}}}
}

func unavailable(t *testing.T, what string, res *apitest.Response) {
	t.Helper()
	if res.Status != http.StatusServiceUnavailable || res.Code() != "unavailable" || res.Header.Get("Retry-After") == "" {
		t.Fatalf("%s: want 503 unavailable with Retry-After, got %d %v %s", what, res.Status, res.Header, res.Body)
	}
	if strings.Contains(string(res.Body), "emulated") || strings.Contains(string(res.Body), "127.0.0.1") {
		t.Fatalf("%s: internal detail in the body: %s", what, res.Body)
	}
}

// TestDynamoDBFailureAtEveryCall runs every endpoint once per DynamoDB call it
// makes, with the table failing from that call on: the answer is 503
// unavailable with Retry-After, nothing is half written, and the same request
// then succeeds.
func TestDynamoDBFailureAtEveryCall(t *testing.T) {
	s := newStack(t)
	sbx, _ := s.sandbox()
	total := 0
	for _, ep := range endpoints(sbx, "") {
		t.Run(ep.name, func(t *testing.T) {
			s.T = t
			defer func() { s.T = nil }()
			for k := 1; ; k++ {
				if k > 12 {
					t.Fatal("still failing after 12 calls; the request makes more calls than expected")
				}
				req := ep.prepare(s)
				s.fault.arm(k)
				res := s.send(req)
				calls := s.fault.disarm()
				if calls < k {
					// The request made fewer than k calls: the fault never fired,
					// and every call position has been covered.
					if res.Status != ep.status {
						t.Fatalf("without a fault: %d %s", res.Status, res.Body)
					}
					if ep.cleanup != nil {
						ep.cleanup(s, res)
					}
					t.Logf("%d DynamoDB call(s), each failed in turn", k-1)
					total += k - 1
					break
				}
				unavailable(t, fmt.Sprintf("failing from call %d", k), res)
				s.consistent()
				// The dependency is back: the same request succeeds.
				again := s.send(req)
				if ep.retried != nil {
					ep.retried(s, again)
				} else if again.Status != ep.status {
					t.Fatalf("after the fault at call %d cleared: %d %s", k, again.Status, again.Body)
				}
				if ep.cleanup != nil {
					ep.cleanup(s, again)
				}
				s.consistent()
			}
		})
	}
	s.T = t
	t.Logf("%d injected failures over %d endpoints", total, len(endpoints(sbx, "")))

	// The API description needs no dependency.
	s.fault.arm(1)
	res := s.Do(http.MethodGet, "/v1/openapi.json", "", nil)
	s.fault.disarm()
	if res.Status != 200 {
		t.Fatalf("openapi.json with the table down: %d", res.Status)
	}
}

// The fault runs cover every operation of the API description but the
// description itself (which needs no dependency and is checked above), so an
// endpoint added to the API without a fault run fails here.
func TestFaultRunsCoverEveryOperation(t *testing.T) {
	v, err := check.Default()
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, ep := range endpoints("", "") {
		name, _, _ := strings.Cut(ep.name, " (")
		covered[name] = true
	}
	for _, op := range v.Operations() {
		if strings.HasPrefix(op, "GET /v1/openapi.") {
			continue
		}
		if !covered[op] {
			t.Errorf("%s has no DynamoDB fault run", op)
		}
	}
}

// TestS3Unreachable: with object storage unreachable, what needs it answers
// 503 and changes nothing; what does not (reads, single-PUT creates, links
// and renewed upload URLs, which are signatures computed locally) keeps
// working; once it is back, the same requests succeed.
func TestS3Unreachable(t *testing.T) {
	s := newStack(t)
	sealed := s.artifact(true)
	open := s.artifact(false)
	// Renewing the upload URLs of a multipart upload created while S3 was up.
	openMultipart := s.must(http.MethodPost, "/v1/artifacts", apitest.BobToken, multipartCreate().body, 201)["artifact"].(map[string]any)["id"].(string)
	needS3 := []request{
		{method: "POST", path: "/v1/artifacts/" + open + "/complete", token: apitest.BobToken},
		multipartCreate(),
	}
	without := []struct {
		req    request
		status int
	}{
		{request{method: "GET", path: "/v1/artifacts", token: apitest.BobToken}, 200},
		{request{method: "GET", path: "/v1/artifacts/" + sealed, token: apitest.BobToken}, 200},
		{request{method: "POST", path: "/v1/artifacts/" + sealed + "/links", token: apitest.BobToken}, 200},
		{request{method: "POST", path: "/v1/artifacts/" + open + "/upload", token: apitest.BobToken}, 200},
		{request{method: "POST", path: "/v1/artifacts/" + openMultipart + "/upload", token: apitest.BobToken}, 200},
		{request{method: "POST", path: "/v1/artifacts", token: apitest.BobToken,
			body: map[string]any{"name": "a.txt", "size": 3, "sha256": digest([]byte("abc"))}}, 201},
	}
	s.s3.set(true)
	for _, r := range needS3 {
		unavailable(t, r.method+" "+r.path, s.send(r))
	}
	for _, w := range without {
		if res := s.send(w.req); res.Status != w.status {
			t.Errorf("%s %s with S3 down: %d %s", w.req.method, w.req.path, res.Status, res.Body)
		}
	}
	s.s3.set(false)
	s.consistent()
	if st := s.must("GET", "/v1/artifacts/"+open, apitest.BobToken, nil, 200)["state"]; st != "open" {
		t.Fatalf("an interrupted complete left the artifact %v", st)
	}
	for _, r := range needS3 {
		res := s.send(r)
		if res.Status != 200 && res.Status != 201 {
			t.Fatalf("%s %s after S3 is back: %d %s", r.method, r.path, res.Status, res.Body)
		}
	}
	s.consistent()
}

// consistent scans the raw table (no faults) and checks what must hold
// whatever failed: each quota's running count equals its live environments,
// each live environment holds exactly its listen-port claims, every sandbox
// has its join key and every join key its sandbox, every sealed artifact
// has its object in the bucket, and the usage ledger holds exactly the
// seconds of the environments that left the live states.
func (s *stack) consistent() {
	t := s.T
	t.Helper()
	ctx := context.Background()
	var items []map[string]types.AttributeValue
	p := dynamodb.NewScanPaginator(s.db, &dynamodb.ScanInput{TableName: aws.String(s.Dynamo.Table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, page.Items...)
	}
	str := func(it map[string]types.AttributeValue, k string) string {
		if v, ok := it[k].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	num := func(it map[string]types.AttributeValue, k string) string {
		if v, ok := it[k].(*types.AttributeValueMemberN); ok {
			return v.Value
		}
		return "0"
	}
	running := map[string]string{}
	live := map[string]int{}
	ports := map[string]bool{}     // ORG#<org>|SBXPORT#<sandbox>#<port> claims
	held := map[string]bool{}      // the same, from live environments
	sandboxes := map[string]bool{} // sandbox ids
	joinKeys := map[string]bool{}  // sandbox ids of join keys
	ledger := map[string]string{}  // ORG#<org>|<template>|<day> -> seconds in the usage ledger
	owed := map[string]int64{}     // the same, from the environments that left the live states
	for _, it := range items {
		pk, sk := str(it, "PK"), str(it, "SK")
		switch {
		case strings.HasPrefix(sk, "QUOTA#"):
			running[pk+"|"+strings.TrimPrefix(sk, "QUOTA#")] = num(it, "running")
		case strings.HasPrefix(sk, "ENV#"):
			if _, ok := it["stopped"]; ok {
				created, err1 := time.Parse(store.TimeLayout, str(it, "created"))
				stopped, err2 := time.Parse(store.TimeLayout, str(it, "stopped"))
				if err1 != nil || err2 != nil {
					t.Fatalf("environment %s: created %q, stopped %q", sk, str(it, "created"), str(it, "stopped"))
				}
				for _, d := range usage.Split(created, stopped) {
					owed[pk+"|"+str(it, "template")+"|"+d.Day] += d.Seconds
				}
			}
			switch str(it, "state") {
			case "pending", "starting", "ready":
				live[pk+"|"+str(it, "template")]++
				if l, ok := it["ports"].(*types.AttributeValueMemberL); ok {
					for _, v := range l.Value {
						held[pk+"|SBXPORT#"+str(it, "sandbox")+"#"+v.(*types.AttributeValueMemberN).Value] = true
					}
				}
			}
		case strings.HasPrefix(sk, "SBXPORT#"):
			ports[pk+"|"+sk] = true
		case strings.HasPrefix(sk, "USAGE#"):
			ledger[pk+"|"+str(it, "template")+"|"+str(it, "day")] = num(it, "seconds")
		case strings.HasPrefix(sk, "SANDBOX#"):
			sandboxes[strings.TrimPrefix(sk, "SANDBOX#")] = true
		case sk == "JOINKEY":
			joinKeys[str(it, "sandbox")] = true
		case strings.HasPrefix(sk, "ARTIFACT#") && str(it, "state") == "sealed":
			if _, err := s.s3srv.Client(ctx).HeadObject(ctx, &s3.HeadObjectInput{
				Bucket: aws.String(s.s3srv.Bucket), Key: aws.String(str(it, "objectKey")),
			}); err != nil {
				t.Fatalf("sealed artifact %s has no object: %v", sk, err)
			}
		}
	}
	for k, r := range running {
		if fmt.Sprint(live[k]) != r {
			t.Fatalf("quota %s: running %s, live environments %d", k, r, live[k])
		}
	}
	for k, n := range live {
		if _, ok := running[k]; !ok && n > 0 {
			t.Fatalf("%d live environments of %s without a quota count", n, k)
		}
	}
	for k := range ports {
		if !held[k] {
			t.Fatalf("port claim %s held by no live environment", k)
		}
	}
	for k := range held {
		if !ports[k] {
			t.Fatalf("live environment port %s without its claim", k)
		}
	}
	// Every stop wrote the ledger, once: it is part of the stop transaction.
	for k, secs := range owed {
		if ledger[k] != fmt.Sprint(secs) {
			t.Fatalf("usage %s: ledger %q, stopped environments %d s", k, ledger[k], secs)
		}
	}
	for k, secs := range ledger {
		if _, ok := owed[k]; !ok && secs != "0" {
			t.Fatalf("usage %s: ledger %s s with no stopped environment", k, secs)
		}
	}
	s.eventsMatch(items)
	for id := range sandboxes {
		if !joinKeys[id] {
			t.Fatalf("sandbox %s without its join key", id)
		}
	}
	for id := range joinKeys {
		if !sandboxes[id] {
			t.Fatalf("join key of sandbox %s without the sandbox", id)
		}
	}
}

// eventsMatch checks the outbox against what it reports, whatever failed:
// every environment, key, sandbox, node and artifact has exactly one event
// of each change it went through that its record shows (created, and its
// present state), never two, and no event names a resource that is not there.
func (s *stack) eventsMatch(items []map[string]types.AttributeValue) {
	t := s.T
	t.Helper()
	str := func(it map[string]types.AttributeValue, k string) string {
		if v, ok := it[k].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	got := map[string]map[string]int{}   // kind/id -> type -> events
	want := map[string]map[string]bool{} // kind/id -> types its record says it has had
	need := func(subject string, types ...string) {
		if want[subject] == nil {
			want[subject] = map[string]bool{}
		}
		for _, typ := range types {
			want[subject][typ] = true
		}
	}
	for _, it := range items {
		pk, sk := str(it, "PK"), str(it, "SK")
		switch {
		case strings.HasPrefix(pk, "EVT#") && strings.HasPrefix(sk, "evt_"):
			subject := str(it, "subjectKind") + "/" + str(it, "subjectId")
			if got[subject] == nil {
				got[subject] = map[string]int{}
			}
			got[subject][str(it, "type")]++
		case strings.HasPrefix(sk, "ENV#"):
			id := "environment/" + strings.TrimPrefix(sk, "ENV#")
			need(id, domain.EventEnvLeased)
			if st := domain.State(str(it, "state")); st != domain.StatePending {
				need(id, domain.EnvEventType(st))
			}
		case sk == "TOKEN":
			id := "key/" + str(it, "id")
			need(id, domain.EventKeyCreated)
			if _, ok := it["revoked"]; ok {
				need(id, domain.EventKeyRevoked)
			}
		case strings.HasPrefix(sk, "SANDBOX#"):
			id := "sandbox/" + strings.TrimPrefix(sk, "SANDBOX#")
			need(id, domain.EventSbxRegister)
			if _, ok := it["joined"]; ok {
				need(id, domain.EventSbxJoined)
			}
		case strings.HasPrefix(sk, "NODE#"):
			id := "node/" + strings.TrimPrefix(sk, "NODE#")
			need(id, domain.EventNodeRegister)
			switch str(it, "state") {
			case domain.NodeLost:
				need(id, domain.EventNodeLost)
			case domain.NodeLeft:
				need(id, domain.EventNodeLeft)
			}
		case strings.HasPrefix(sk, "ISSUER#"):
			need("issuer/"+strings.TrimPrefix(sk, "ISSUER#"), domain.EventIssuerTrusted)
		case strings.HasPrefix(sk, "ARTIFACT#"):
			id := "artifact/" + strings.TrimPrefix(sk, "ARTIFACT#")
			need(id)
			switch str(it, "state") {
			case domain.ArtifactSealed:
				need(id, domain.EventArtSealed)
			case domain.ArtifactExpired:
				need(id, domain.EventArtExpired)
			}
		}
	}
	for subject, types := range want {
		for typ := range types {
			if n := got[subject][typ]; n != 1 {
				t.Fatalf("%s: %d %s event(s), want exactly one", subject, n, typ)
			}
		}
	}
	for subject, types := range got {
		kind, _, _ := strings.Cut(subject, "/")
		switch kind {
		case "template", "webhook":
			continue // quota refusals and disabled webhooks report no record of their own
		case "secret":
			continue // each set of a secret is an event, and a deleted one leaves no record
		case "issuer":
			// A removed issuer's record is gone: its trust and its removal
			// are both told, once each.
			if want[subject] == nil && (types[domain.EventIssuerTrusted] != 1 || types[domain.EventIssuerRemoved] != 1) {
				t.Fatalf("%s: events %v of an issuer without a record, want one issuer.trusted and one issuer.removed", subject, types)
			}
			if want[subject] == nil {
				continue
			}
		}
		for typ, n := range types {
			if n > 1 {
				t.Fatalf("%s: %d %s events", subject, n, typ)
			}
			if want[subject] == nil {
				t.Fatalf("%s: a %s event for a record that does not exist", subject, typ)
			}
			// Intermediate environment states (starting, ready, stopping)
			// leave no mark on the final record: only count them.
			if !want[subject][typ] && kind != "environment" && kind != "artifact" {
				t.Fatalf("%s: a %s event its record does not show", subject, typ)
			}
		}
	}
}
