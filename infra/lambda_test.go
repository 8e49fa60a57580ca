package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/envlease/envlease/infra/bundle"
	"github.com/envlease/envlease/infra/lambdatest"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/fixture"
	"github.com/envlease/envlease/shared/store"
)

// The local stand-ins of the stack's account, region and link signer secret.
const (
	localRegion    = devstack.Region
	localAccount   = "123456789012"
	localSecretARN = "arn:aws:secretsmanager:" + localRegion + ":" + localAccount + ":secret:envlease-link-signer"
	// socketAPIID is what Ref of the WebSocket API resolves to; the stage
	// URLs built from it are then pointed at the local management API.
	socketAPIID = "localws"
)

// sampleNodeToken is the node credential of the WebSocket sample events.
const sampleNodeToken = "els_node_SampleEventsNodeCredential000000000000000"

// invokeWait is how much longer than its timeout an invocation may take on
// a busy test machine before the test gives up on it.
const invokeWait = 2 * time.Minute

// lambdaStack is every function of the synthesized template running as its
// bootstrap binary behind a local Runtime API, against local DynamoDB and
// S3, with an HTTP API stage (the template's routes) in front.
type lambdaStack struct {
	tmpl     *lambdatest.Template
	rec      *lambdatest.Recorder
	dyn      *devstack.Dynamo
	s3       *devstack.S3
	store    *store.Store
	fns      map[string]*lambdatest.Function // by group name
	roles    map[string]string               // group name -> role logical id
	api      *httptest.Server
	statusMu sync.Mutex
	statuses map[string][]int
}

// startLambdas builds the binaries for this machine exactly as scripts/build
// does for Lambda (only GOARCH differs), reads each function from the
// template, resolves its environment to the local stack and starts it.
func startLambdas(t *testing.T, s *synthesized) *lambdaStack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := bundle.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	built, err := bundle.Build(ctx, bundle.Options{
		Root: root, OutDir: filepath.Join(t.TempDir(), "lambda"), Functions: GroupNames(Groups), GOARCH: runtime.GOARCH,
	})
	if err != nil {
		t.Fatalf("build the bootstrap binaries for %s: %v", runtime.GOARCH, err)
	}

	ls := &lambdaStack{
		tmpl: lambdatest.NewTemplate(s.Template), rec: lambdatest.NewRecorder(),
		dyn: devstack.NewTestDynamo(t), s3: devstack.NewTestS3(t),
		fns: map[string]*lambdatest.Function{}, roles: map[string]string{}, statuses: map[string][]int{},
	}
	ls.store = store.New(ls.dyn.Client(ctx), ls.dyn.Table)
	if err := fixture.Apply(ctx, ls.store, apitest.Fixture(t), fixture.Options{WithTokens: true, Now: time.Now()}); err != nil {
		t.Fatalf("apply fixture: %v", err)
	}
	// The node credential the WebSocket sample events carry, issued to the
	// pool as an admin would.
	if err := ls.store.PutKey(ctx, domain.APIKey{
		ID: "key_samplenode", Kind: "org", Name: "sample", Prefix: auth.DisplayPrefix(sampleNodeToken), CreatedBy: "alice",
		Source: "api", Created: time.Now(), Owner: domain.Owner{Kind: "pool", ID: "local"}, OrgID: "acme",
		Credential: domain.CredentialNode, Pool: "local", Hash: auth.HashToken(sampleNodeToken),
	}); err != nil {
		t.Fatal(err)
	}
	secret, _ := json.Marshal(map[string]string{"accessKeyId": ls.s3.AccessKey, "secretAccessKey": ls.s3.SecretKey})

	byID := map[string]*lambdatest.Function{}
	for _, g := range Groups {
		id := s.FunctionIDs[g.Name]
		spec, err := ls.tmpl.Function(id)
		if err != nil {
			t.Fatalf("function %s: %v", g.Name, err)
		}
		ls.roles[g.Name] = spec.Role
		// Each function reaches AWS through endpoints of its own, so every
		// call is recorded against the function that made it.
		dynP := ls.rec.DynamoProxy(g.Name, ls.dyn.Endpoint)
		s3P := ls.rec.S3Proxy(g.Name, "linksigner", ls.s3.Endpoint)
		smP := ls.rec.SecretsManager(g.Name, string(secret))
		mgP := ls.rec.Management(g.Name)
		kmsP := ls.rec.KMS(g.Name)
		for _, srv := range []*httptest.Server{dynP, s3P, smP, mgP, kmsP} {
			t.Cleanup(srv.Close)
		}
		s3Host := strings.TrimPrefix(s3P.URL, "http://")
		locals := lambdatest.Locals{
			Region: localRegion, Account: localAccount,
			Ref: map[string]string{
				"AWS::DynamoDB::Table":        ls.dyn.Table,
				"AWS::S3::Bucket":             ls.s3.Bucket,
				"AWS::SecretsManager::Secret": localSecretARN,
				"AWS::ApiGatewayV2::Api":      socketAPIID,
			},
			GetAtt: map[string]string{
				"AWS::S3::Bucket.RegionalDomainName": s3Host,
				"AWS::S3::Bucket.DomainName":         s3Host,
				"AWS::S3::Bucket.Arn":                "arn:aws:s3:::" + ls.s3.Bucket,
				"AWS::DynamoDB::Table.Arn":           "arn:aws:dynamodb:" + localRegion + ":" + localAccount + ":table/" + ls.dyn.Table,
				"AWS::KMS::Key.Arn":                  "arn:aws:kms:" + localRegion + ":" + localAccount + ":key/identity",
				// The identity function's ISSUER_URL: a name only (what
				// tokens say as iss), never fetched by this test.
				"AWS::ApiGatewayV2::Api.ApiEndpoint": "https://" + socketAPIID + ".execute-api." + localRegion + ".amazonaws.com",
			},
		}
		taskRoot := t.TempDir()
		env := lambdatest.LambdaEnv(g.Name, spec, localRegion, [3]string{ls.s3.AccessKey, ls.s3.SecretKey, ""}, taskRoot)
		names := make([]string, 0, len(spec.Env))
		for k := range spec.Env {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			v, err := ls.tmpl.Resolve(spec.Env[k], locals)
			if err != nil {
				t.Fatalf("function %s: environment variable %s: %v", g.Name, k, err)
			}
			env = append(env, k+"="+localSocket(v, mgP.URL))
		}
		env = append(env,
			"AWS_ENDPOINT_URL_DYNAMODB="+dynP.URL,
			"AWS_ENDPOINT_URL_S3="+s3P.URL,
			"AWS_ENDPOINT_URL_SECRETS_MANAGER="+smP.URL,
			"AWS_ENDPOINT_URL_KMS="+kmsP.URL,
		)
		fn := &lambdatest.Function{
			Name: g.Name, Spec: spec, Bootstrap: filepath.Join(built.Dirs[g.Name], "bootstrap"), Env: env,
			ARN: "arn:aws:lambda:" + localRegion + ":" + localAccount + ":function:" + g.Name, Wait: invokeWait,
		}
		t.Cleanup(fn.Stop)
		ls.fns[g.Name] = fn
		byID[id] = fn
	}
	// Init phases in parallel, as Lambda would cold-start them.
	var wg sync.WaitGroup
	errs := make(chan error, len(ls.fns))
	for _, fn := range ls.fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn.Start(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	routes, err := ls.tmpl.HTTPRoutes()
	if err != nil {
		t.Fatal(err)
	}
	gw := &lambdatest.Gateway{Routes: routes, Functions: byID, OnInvoke: func(fn string, status int) {
		ls.statusMu.Lock()
		ls.statuses[fn] = append(ls.statuses[fn], status)
		ls.statusMu.Unlock()
	}}
	ls.api = httptest.NewServer(gw)
	t.Cleanup(ls.api.Close)
	if err := devstack.AllowBrowserOrigin(ctx, ls.s3.Client(ctx), ls.s3.Bucket, ls.api.URL); err != nil {
		t.Fatal(err)
	}
	return ls
}

// localSocket points a WebSocket stage's URL (its management endpoint) at
// the local management API; other values pass unchanged.
func localSocket(v, mgmt string) string {
	u, err := url.Parse(v)
	if err != nil || !strings.HasPrefix(u.Host, socketAPIID+".execute-api.") {
		return v
	}
	if u.Scheme != "https" {
		return v // the wss:// URL nodes are told; nothing local serves it
	}
	return mgmt + u.Path
}

// eventFunction is the group a sample event of events/ is for: the file's
// name up to the first dash, or after scheduled-/stream-.
func eventFunction(file string) string {
	name := strings.TrimSuffix(file, ".json")
	for _, p := range []string{"scheduled-", "stream-"} {
		if rest, ok := strings.CutPrefix(name, p); ok {
			return rest
		}
	}
	g, _, _ := strings.Cut(name, "-")
	return g
}

func TestLambdaRuntime(t *testing.T) {
	s := synth(t)
	if len(s.Missing) > 0 || s.BuildErr != nil {
		t.Skip("TestRealFunctionsBuilt fails: the functions are not all built")
	}
	ls := startLambdas(t, s)
	ctx := context.Background()

	t.Run("sample events", func(t *testing.T) { ls.sampleEvents(ctx, t) })
	t.Run("routes", func(t *testing.T) { ls.routes(ctx, t) })
	t.Run("smoke", func(t *testing.T) { runSmokeAgainst(t, ls.api.URL) })
	t.Run("jobs", func(t *testing.T) { ls.jobs(ctx, t) })
	t.Run("memory", func(t *testing.T) {
		for _, g := range Groups {
			fn := ls.fns[g.Name]
			peak := fn.PeakRSSMB()
			t.Logf("%-13s %3d invocations, peak RSS %3d MiB of %4d MB", g.Name, fn.Invocations(), peak, fn.Spec.MemoryMB)
			if peak > fn.Spec.MemoryMB {
				t.Errorf("function %s: peak RSS %d MiB over its %d MB", g.Name, peak, fn.Spec.MemoryMB)
			}
			if fn.Invocations() == 0 {
				t.Errorf("function %s was never invoked", g.Name)
			}
		}
	})
	t.Run("least privilege", func(t *testing.T) { ls.leastPrivilege(t) })
}

// sampleEvents sends every file of events/ to its function and checks that
// the function answered as its kind of event expects.
func (ls *lambdaStack) sampleEvents(ctx context.Context, t *testing.T) {
	root, _ := bundle.FindRoot(".")
	files, err := filepath.Glob(filepath.Join(root, "events", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no sample events: %v", err)
	}
	// Status codes a sample event must get; others must be below 500.
	want := map[string]int{
		"tokens-create.json": 201, "keys-whoami.json": 200, "keys-list.json": 200, "templates-list.json": 200,
		"quotas-list.json": 200, "events-list.json": 200, "docs-openapi.json": 200, "console-index.json": 200,
		"webhooks-list.json": 200, "sandboxes-list.json": 200, "environments-list.json": 200,
		"artifacts-list.json": 200, "nodes-list.json": 200, "usage-get.json": 200, "secrets-list.json": 200,
	}
	var wg sync.WaitGroup
	// The $connect authorizer's context, which API Gateway hands every
	// message of the connection.
	var authorizer map[string]any
	for _, f := range files {
		base := filepath.Base(f)
		fn := ls.fns[eventFunction(base)]
		if fn == nil {
			t.Errorf("%s: no function %q for it", base, eventFunction(base))
			continue
		}
		payload, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var probe struct {
			Version    string `json:"version"`
			DetailType string `json:"detail-type"`
		}
		json.Unmarshal(payload, &probe)
		if base == "nodesws-message.json" {
			var ev map[string]any
			json.Unmarshal(payload, &ev)
			ev["requestContext"].(map[string]any)["authorizer"] = authorizer
			payload, _ = json.Marshal(ev)
		}
		check := func() {
			out, err := fn.Invoke(ctx, payload)
			if err != nil {
				t.Errorf("%s -> %s: %v", base, fn.Name, err)
				return
			}
			if base == "nodesws-authorize.json" {
				var pol struct {
					Context map[string]any `json:"context"`
				}
				if json.Unmarshal(out, &pol) != nil || pol.Context["pool"] != "local" {
					t.Errorf("%s -> %s: no node principal: %s", base, fn.Name, out)
				}
				authorizer = pol.Context
			}
			if base == "nodesws-message.json" && !strings.Contains(string(out), `"statusCode":200`) {
				t.Errorf("%s -> %s: %s", base, fn.Name, out)
			}
			if probe.Version != "2.0" {
				if !json.Valid(out) {
					t.Errorf("%s -> %s: answer is not JSON: %s", base, fn.Name, out)
				}
				return
			}
			var res events.APIGatewayV2HTTPResponse
			if err := json.Unmarshal(out, &res); err != nil || res.StatusCode == 0 {
				t.Errorf("%s -> %s: not a proxy response: %s", base, fn.Name, out)
				return
			}
			if w, ok := want[base]; ok && res.StatusCode != w {
				t.Errorf("%s -> %s: status %d, want %d: %s", base, fn.Name, res.StatusCode, w, res.Body)
			} else if res.StatusCode >= 500 {
				t.Errorf("%s -> %s: status %d: %s", base, fn.Name, res.StatusCode, res.Body)
			}
		}
		if probe.DetailType == "Scheduled Event" {
			// Jobs may run until their deadline (nodesws re-offers for the
			// whole minute): in parallel, on environments of their own.
			wg.Add(1)
			go func() { defer wg.Done(); check() }()
			continue
		}
		check()
	}
	// lostnodes has no sample event of its own; its schedule sends this one.
	lost, err := os.ReadFile(filepath.Join(root, "events", "scheduled-timeouts.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ls.fns["lostnodes"].Invoke(ctx, lost); err != nil {
		t.Errorf("scheduled event -> lostnodes: %v", err)
	}
	wg.Wait()
}

// routes drives real requests through the HTTP API stage: an admin's token,
// the read endpoints, an artifact round trip through S3 and a lease.
func (ls *lambdaStack) routes(ctx context.Context, t *testing.T) {
	get := func(path string, want int) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ls.api.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+apitest.AliceToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, res.StatusCode, want)
		}
	}
	get("/v1/openapi.json", 200)
	get("/", 200)
	get("/v1/nothing-here", 404)
	get("/v1/templates", 200)
	get("/v1/environments/env_000000000000000000000000", 404)
	// The issuer's documents; the key set is read from KMS.
	get("/.well-known/openid-configuration", 200)
	get("/.well-known/jwks.json", 200)
	get("/v1/environments/env_000000000000000000000000/identity", 404)
	ls.consoleSignIn(ctx, t)
	ls.revokeConnectedNode(ctx, t)
	ls.deleteWebhooks(ctx, t)
	ls.joinSandbox(ctx, t)
}

// joinSandbox registers a sandbox and redeems its join key.
func (ls *lambdaStack) joinSandbox(ctx context.Context, t *testing.T) {
	status, raw := ls.call(ctx, t, http.MethodPost, "/v1/sandboxes", apitest.AliceToken, map[string]string{
		"name": "lambda-test-sandbox", "hostname": "lambda-test.local",
		"publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample alice@lambda-test",
	})
	var reg struct {
		Sandbox struct {
			ID string `json:"id"`
		} `json:"sandbox"`
		JoinKey string `json:"joinKey"`
	}
	if status != http.StatusCreated || json.Unmarshal(raw, &reg) != nil || reg.JoinKey == "" || reg.Sandbox.ID == "" {
		t.Fatalf("register a sandbox: %d %s", status, raw)
	}
	if status, raw := ls.call(ctx, t, http.MethodPost, "/v1/sandboxes/join", apitest.AliceToken, map[string]string{"joinKey": reg.JoinKey}); status != http.StatusOK {
		t.Errorf("join the sandbox: %d %s", status, raw)
	}
	// A lease into the sandbox checks, in its transaction, that the sandbox
	// is still registered; it is released at once.
	c, err := client.New(ls.api.URL, apitest.AliceToken)
	if err != nil {
		t.Fatal(err)
	}
	leased, err := c.Lease(ctx, client.LeaseRequest{Template: "sleeper", Pool: "local", Sandbox: reg.Sandbox.ID})
	if err != nil {
		t.Fatalf("lease into the sandbox: %v", err)
	}
	if _, err := c.DeleteEnvironment(ctx, leased.Environment.ID); err != nil {
		t.Errorf("release the sandbox's environment: %v", err)
	}
}

// deleteWebhooks deletes the webhooks the sample events created.
func (ls *lambdaStack) deleteWebhooks(ctx context.Context, t *testing.T) {
	status, raw := ls.call(ctx, t, http.MethodGet, "/v1/webhooks", apitest.AliceToken, nil)
	var list struct {
		Webhooks []struct {
			ID string `json:"id"`
		} `json:"webhooks"`
	}
	if status != http.StatusOK || json.Unmarshal(raw, &list) != nil || len(list.Webhooks) == 0 {
		t.Fatalf("list webhooks: %d %s", status, raw)
	}
	for _, w := range list.Webhooks {
		if status, raw := ls.call(ctx, t, http.MethodDelete, "/v1/webhooks/"+w.ID, apitest.AliceToken, nil); status >= 300 {
			t.Errorf("delete webhook %s: %d %s", w.ID, status, raw)
		}
	}
}

// call sends a JSON request through the HTTP API stage and returns the
// status and the body.
func (ls *lambdaStack) call(ctx context.Context, t *testing.T, method, path, token string, in any) (int, []byte) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(ctx, method, ls.api.URL+path, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, out
}

// consoleSignIn asks for a console sign-in code with a CLI token and spends
// it twice: the code's read, the exchange's transaction (delete the code,
// check the asking key, put the new key) and, for the refused second
// exchange, the failed-attempt counter.
func (ls *lambdaStack) consoleSignIn(ctx context.Context, t *testing.T) {
	status, raw := ls.call(ctx, t, http.MethodPost, "/v1/console/codes", apitest.AliceToken, nil)
	var code struct {
		Code string `json:"code"`
	}
	if status != http.StatusCreated || json.Unmarshal(raw, &code) != nil || code.Code == "" {
		t.Fatalf("console code: %d %s", status, raw)
	}
	if status, raw := ls.call(ctx, t, http.MethodPost, "/v1/console/sessions", "", map[string]string{"code": code.Code}); status != http.StatusCreated {
		t.Errorf("exchange a console code: %d %s", status, raw)
	}
	if status, raw := ls.call(ctx, t, http.MethodPost, "/v1/console/sessions", "", map[string]string{"code": code.Code}); status != http.StatusUnauthorized {
		t.Errorf("exchange a spent console code: %d %s, want 401", status, raw)
	}
}

// revokeConnectedNode revokes the sample events' node credential while a
// connection of it is recorded: revocation deletes the record and closes
// the connection (which the local Management API answers as gone).
func (ls *lambdaStack) revokeConnectedNode(ctx context.Context, t *testing.T) {
	if err := ls.store.PutConnection(ctx, domain.NodeConnection{
		ID: "RevokedConn0=", OrgID: "acme", Pool: "local", KeyID: "key_samplenode", Connected: time.Now(),
	}, ""); err != nil {
		t.Fatal(err)
	}
	if status, raw := ls.call(ctx, t, http.MethodDelete, "/v1/keys/key_samplenode", apitest.AliceToken, nil); status != http.StatusOK {
		t.Fatalf("revoke the node credential: %d %s", status, raw)
	}
	if ls.rec.Calls("keys", "execute-api:ManageConnections") == 0 {
		t.Errorf("revoking a connected node credential closed no connection")
	}
}

// TestTemplateFunctionsHaveBinaries is what `sam validate` and `sam local`
// would find first, checked without Docker: every provided-runtime function
// of the template names the handler bootstrap, and its asset folder (the
// aws:asset:path SAM and LocalStack deploy from) holds that bootstrap as a
// Linux arm64 executable, as its Architectures say.
func TestTemplateFunctionsHaveBinaries(t *testing.T) {
	s := synth(t)
	tmpl := lambdatest.NewTemplate(s.Template)
	seen := map[string]bool{}
	for id, r := range tmpl.Resources {
		if r["Type"] != "AWS::Lambda::Function" {
			continue
		}
		spec, err := tmpl.Function(id)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if !strings.HasPrefix(spec.Runtime, "provided") {
			continue // CDK's own helper functions, if any
		}
		seen[id] = true
		if spec.Handler != "bootstrap" {
			t.Errorf("%s: handler %q; a provided runtime runs bootstrap", id, spec.Handler)
		}
		if spec.Asset == "" {
			t.Errorf("%s: no aws:asset:path", id)
			continue
		}
		bin := filepath.Join(s.Outdir, spec.Asset, "bootstrap")
		if err := lambdatest.CheckBootstrap(bin, "arm64"); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	for _, g := range Groups {
		if !seen[s.FunctionIDs[g.Name]] {
			t.Errorf("function %s: not a provided-runtime function of the template", g.Name)
		}
	}
	if len(seen) != len(Groups) {
		t.Errorf("%d provided-runtime functions in the template, %d groups", len(seen), len(Groups))
	}
}

// TestLocalStackScriptParses: the LocalStack deploy script cannot run here
// (no LocalStack), but it must at least parse, and deploy the stack this
// app synthesizes.
func TestLocalStackScriptParses(t *testing.T) {
	root, err := bundle.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "localstack", "deploy.sh")
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", script, err, out)
	}
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "STACK="+StackName) {
		t.Errorf("the script does not deploy stack %s", StackName)
	}
}
