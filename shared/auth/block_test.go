package auth_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/store"
)

// blockEnv serves the keys, nodes and environments groups through the real
// stack, with a call counter on the authenticator's DynamoDB client.
type blockEnv struct {
	*apitest.Env
	nodes   *nodes.Service
	counter *store.CallCounter
}

func newBlockEnv(t *testing.T) *blockEnv {
	t.Helper()
	e := apitest.New(t, nil)
	counter := store.NewCallCounter()
	counted := e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), counter.Option))
	e.Auth = auth.New(counted, e.Clock, e.Log)
	keySvc := keys.NewService(e.Store, e.Clock)
	nodeSvc := nodes.NewService(e.Store, nil, e.Clock, nodes.Options{PollMin: 5 * time.Millisecond, PollMax: 20 * time.Millisecond})
	e.Handler = httpapi.New(httpapi.Config{Logger: e.Log, Auth: e.Auth},
		keys.TokenRoutes(keySvc), keys.KeyRoutes(keySvc), nodes.Routes(nodeSvc),
		environments.Routes(environments.NewService(e.Store, e.Clock)))
	return &blockEnv{Env: e, nodes: nodeSvc, counter: counter}
}

// issue creates a credential as token (an admin's) and returns the secret.
func (e *blockEnv) issue(t *testing.T, path, token string, body any) string {
	t.Helper()
	r := e.Do(http.MethodPost, path, token, body)
	var out struct {
		Token string `json:"token"`
	}
	r.JSON(t, &out)
	if r.Status != http.StatusCreated || out.Token == "" {
		t.Fatalf("POST %s: %d %s", path, r.Status, r.Body)
	}
	return out.Token
}

// block sends ten bad tokens, the last of which blocks the address.
func (e *blockEnv) block(t *testing.T) {
	t.Helper()
	for i := 1; i <= auth.FailureThreshold; i++ {
		if r := e.Do(http.MethodGet, "/v1/keys", "els_cli_notavalidtoken0123456789abcdefghijk", nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d %s", i, r.Status, r.Body)
		}
	}
}

// The tenth failure within the window is answered as the failure it is; the
// block starts after it. Every kind of failure counts alike.
func TestTenthFailureIsAnsweredAndTheEleventhIsLocked(t *testing.T) {
	e := newBlockEnv(t)
	e.RemoteAddr = "203.0.113.40:1000"
	revoked := e.issue(t, "/v1/tokens", apitest.AliceToken, map[string]string{"name": "old"})
	r := e.Do(http.MethodGet, "/v1/keys", apitest.AliceToken, nil)
	var listed struct {
		Keys []domain.APIKey `json:"keys"`
	}
	r.JSON(t, &listed)
	for _, k := range listed.Keys {
		if strings.HasPrefix(revoked, k.Prefix) && k.Name == "old" {
			if r := e.Do(http.MethodDelete, "/v1/keys/"+k.ID, apitest.AliceToken, nil); r.Status != http.StatusOK {
				t.Fatalf("revoke: %d %s", r.Status, r.Body)
			}
		}
	}
	attempts := []struct {
		name, authorization string
	}{
		{"no token", ""},
		{"malformed", "Bearer short"},
		{"unknown", "Bearer els_cli_unknown0123456789abcdefghijklmnopqrstuvwxyz0"},
		{"revoked", "Bearer " + revoked},
		{"other scheme", "Basic dXNlcjpwYXNz"},
	}
	for n := 1; n <= auth.FailureThreshold+1; n++ {
		a := attempts[(n-1)%len(attempts)]
		if n <= auth.FailureThreshold {
			e.Clock.Advance(time.Second) // ten failures spread over ten seconds, all within the window
		}
		r := e.DoWith(http.MethodGet, "/v1/keys", "", nil, http.Header{"Authorization": {a.authorization}})
		switch {
		case n <= auth.FailureThreshold:
			if r.Status != http.StatusUnauthorized || r.Code() != "unauthorized" || r.Header.Get("Retry-After") != "" {
				t.Fatalf("attempt %d (%s): %d %s retry=%q", n, a.name, r.Status, r.Body, r.Header.Get("Retry-After"))
			}
		default:
			if r.Status != http.StatusTooManyRequests || r.Code() != "locked" || r.Header.Get("Retry-After") != "60" {
				t.Fatalf("attempt %d (%s): %d %s retry=%q", n, a.name, r.Status, r.Body, r.Header.Get("Retry-After"))
			}
			if r.Header.Get("WWW-Authenticate") != "" {
				t.Fatalf("a locked answer carries a challenge: %q", r.Header.Get("WWW-Authenticate"))
			}
		}
	}
	// The block runs 60 s from the tenth failure, not from the first.
	e.Clock.Advance(59 * time.Second)
	if r := e.Do(http.MethodGet, "/v1/keys", apitest.AliceToken, nil); r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("59 s into the block: %d retry=%q", r.Status, r.Header.Get("Retry-After"))
	}
	e.Clock.Advance(time.Second)
	if r := e.Do(http.MethodGet, "/v1/keys", apitest.AliceToken, nil); r.Status != http.StatusOK {
		t.Fatalf("after the block: %d %s", r.Status, r.Body)
	}
}

// Through the whole stack, a 401 says which scheme to use and whether the
// offered token was the problem (RFC 6750 section 3).
func TestUnauthorizedCarriesBearerChallenge(t *testing.T) {
	e := newBlockEnv(t)
	cases := []struct {
		name, authorization, challenge string
	}{
		{"no token", "", "Bearer"},
		{"another scheme", "Basic dXNlcjpwYXNz", "Bearer"},
		{"malformed token", "Bearer short", `Bearer error="invalid_token"`},
		{"unknown token", "Bearer els_cli_unknown0123456789abcdefghijklmnopqrstuvwxyz0", `Bearer error="invalid_token"`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.RemoteAddr = "203.0.113." + string(rune('1'+i)) + ":1"
			r := e.DoWith(http.MethodGet, "/v1/keys", "", nil, http.Header{"Authorization": {c.authorization}})
			if r.Status != http.StatusUnauthorized || r.Header.Get("WWW-Authenticate") != c.challenge {
				t.Fatalf("%d %s, WWW-Authenticate %q, want %q", r.Status, r.Body, r.Header.Get("WWW-Authenticate"), c.challenge)
			}
		})
	}
}

// A blocked address refuses every credential but a valid node credential, and
// telling them apart costs nothing more than the usual one read.
func TestBlockSparesOnlyValidNodeCredentials(t *testing.T) {
	e := newBlockEnv(t)
	e.RemoteAddr = "198.51.100.30:1"
	node := e.issue(t, "/v1/nodes/credentials", apitest.AliceToken, map[string]string{"pool": "local", "name": "rack"})
	revokedNode := e.issue(t, "/v1/nodes/credentials", apitest.AliceToken, map[string]string{"pool": "local", "name": "old rack"})
	orgKey := e.issue(t, "/v1/keys", apitest.AliceToken, map[string]string{"name": "ci"})
	var listed struct {
		Keys []domain.APIKey `json:"keys"`
	}
	e.Do(http.MethodGet, "/v1/keys", apitest.AliceToken, nil).JSON(t, &listed)
	for _, k := range listed.Keys {
		if k.Name == "old rack" {
			if r := e.Do(http.MethodDelete, "/v1/keys/"+k.ID, apitest.AliceToken, nil); r.Status != http.StatusOK {
				t.Fatalf("revoke: %d %s", r.Status, r.Body)
			}
		}
	}
	e.block(t)

	cases := []struct {
		name, method, path, token string
		status                    int
	}{
		{"node credential", http.MethodPost, "/v1/nodes", node, http.StatusCreated},
		{"revoked node credential", http.MethodPost, "/v1/nodes", revokedNode, http.StatusTooManyRequests},
		{"admin's CLI token", http.MethodGet, "/v1/keys", apitest.AliceToken, http.StatusTooManyRequests},
		{"member's CLI token", http.MethodGet, "/v1/environments", apitest.BobToken, http.StatusTooManyRequests},
		{"organization key", http.MethodGet, "/v1/environments", orgKey, http.StatusTooManyRequests},
		{"person's token on the node API", http.MethodPost, "/v1/nodes", apitest.AliceToken, http.StatusTooManyRequests},
		{"no token", http.MethodGet, "/v1/keys", "", http.StatusTooManyRequests},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body any
			if c.method == http.MethodPost {
				body = map[string]any{"name": "n1", "address": "127.0.0.1", "capacity": 1}
			}
			before := e.counter.Counts()["BatchGetItem"]
			r := e.Do(c.method, c.path, c.token, body)
			if r.Status != c.status {
				t.Fatalf("%d %s, want %d", r.Status, r.Body, c.status)
			}
			if c.status == http.StatusTooManyRequests && (r.Code() != "locked" || r.Header.Get("Retry-After") == "") {
				t.Fatalf("refusal: %s retry=%q", r.Body, r.Header.Get("Retry-After"))
			}
			if got := e.counter.Counts()["BatchGetItem"] - before; got != 1 {
				t.Fatalf("%d credential reads, want 1", got)
			}
		})
	}
}

// Something sharing a node's address keeps the address blocked for minutes,
// far beyond the time after which a silent node is declared lost. The node
// keeps heartbeating and claiming, so it stays registered and what it runs
// stays ready; a person's token from the same address is refused throughout.
func TestNodeOutlivesABlockOfItsAddress(t *testing.T) {
	e := newBlockEnv(t)
	ctx := context.Background()
	const nodeAddr, elsewhere = "198.51.100.7:4000", "192.0.2.200:1"
	e.RemoteAddr = nodeAddr
	tok := e.issue(t, "/v1/nodes/credentials", apitest.AliceToken, map[string]string{"pool": "local", "name": "rack"})
	var reg nodes.Registered
	r := e.Do(http.MethodPost, "/v1/nodes", tok, map[string]any{"name": "n1", "address": "127.0.0.1", "capacity": 2})
	r.JSON(t, &reg)
	if r.Status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	node := reg.Node.ID
	r = e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "sleeper"})
	var leased environments.Leased
	r.JSON(t, &leased)
	if r.Status != http.StatusCreated {
		t.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	envID := leased.Environment.ID
	if r := e.Do(http.MethodPost, "/v1/nodes/"+node+"/claim?wait=0s", tok, nil); r.Status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	if r := e.Do(http.MethodPost, "/v1/nodes/"+node+"/environments/"+envID+"/report", tok, map[string]any{"state": "ready"}); r.Status != http.StatusOK {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}

	bad := "Bearer els_cli_notavalidtoken0123456789abcdefghijk"
	span := 4 * reg.LostAfter.Std()
	for elapsed := time.Duration(0); elapsed <= span; elapsed += reg.HeartbeatInterval.Std() {
		// Ten bad tokens every interval: while the address is blocked they
		// are refused, and when a block ends they start the next one.
		for i := 0; i < auth.FailureThreshold; i++ {
			if r := e.DoWith(http.MethodGet, "/v1/keys", "", nil, http.Header{"Authorization": {bad}}); r.Status != http.StatusUnauthorized && r.Status != http.StatusTooManyRequests {
				t.Fatalf("+%s bad token: %d %s", elapsed, r.Status, r.Body)
			}
		}
		if r := e.Do(http.MethodGet, "/v1/environments/"+envID, apitest.BobToken, nil); r.Status != http.StatusTooManyRequests || r.Code() != "locked" {
			t.Fatalf("+%s person's token from the node's address: %d %s", elapsed, r.Status, r.Body)
		}
		r := e.Do(http.MethodPost, "/v1/nodes/"+node+"/heartbeat", tok, map[string]any{"environments": []string{envID}})
		var beat struct {
			Environments []struct {
				ID    string       `json:"id"`
				State domain.State `json:"state"`
			} `json:"environments"`
		}
		r.JSON(t, &beat)
		if r.Status != http.StatusOK || len(beat.Environments) != 1 || beat.Environments[0].State != domain.StateReady {
			t.Fatalf("+%s heartbeat: %d %s", elapsed, r.Status, r.Body)
		}
		if r := e.Do(http.MethodPost, "/v1/nodes/"+node+"/claim?wait=0s", tok, nil); r.Status != http.StatusNoContent {
			t.Fatalf("+%s claim: %d %s", elapsed, r.Status, r.Body)
		}
		e.Clock.Advance(reg.HeartbeatInterval.Std())
		if res, err := e.nodes.SweepLostNodes(ctx, e.Clock.Now()); err != nil || res.Nodes != 0 {
			t.Fatalf("+%s sweep: %+v %v", elapsed, res, err)
		}
	}

	e.RemoteAddr = elsewhere
	var listed struct {
		Nodes []domain.Node `json:"nodes"`
	}
	e.Do(http.MethodGet, "/v1/nodes", apitest.AliceToken, nil).JSON(t, &listed)
	if len(listed.Nodes) != 1 || listed.Nodes[0].ID != node || listed.Nodes[0].State != domain.NodeActive {
		t.Fatalf("nodes after the block: %+v", listed.Nodes)
	}
	var got domain.Environment
	if r := e.Do(http.MethodGet, "/v1/environments/"+envID, apitest.BobToken, nil); r.Status != http.StatusOK {
		t.Fatalf("environment: %d %s", r.Status, r.Body)
	} else {
		r.JSON(t, &got)
	}
	if got.State != domain.StateReady || got.Node != node {
		t.Fatalf("environment after the block: %+v", got)
	}
}
