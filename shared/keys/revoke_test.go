package keys_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/nodes"
)

// closerFunc is a keys.ConnectionCloser.
type closerFunc func(ctx context.Context, k domain.APIKey) error

func (f closerFunc) CloseConnections(ctx context.Context, k domain.APIKey) error { return f(ctx, k) }

// Revoking a node credential closes its connections, also when it was
// already revoked (so revoking again retries a close that failed); a
// failing close answers the revocation 503, the key revoked all the same.
// Other credentials hold no connection.
func TestRevokingANodeCredentialClosesItsConnections(t *testing.T) {
	var closed []domain.APIKey
	var fail error
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		svc := keys.NewService(e.Store, e.Clock, keys.WithConnectionCloser(closerFunc(func(_ context.Context, k domain.APIKey) error {
			closed = append(closed, k)
			return fail
		})))
		return [][]httpapi.Route{keys.TokenRoutes(svc), keys.KeyRoutes(svc)}
	})
	ctx := context.Background()
	admin := domain.Principal{OrgID: "acme", UserID: "alice", Role: domain.RoleAdmin}
	node := domain.APIKey{ID: "key_nodecred", Kind: "org", Name: "rack", Prefix: "els_node_abc", CreatedBy: "alice", Source: "api",
		Created: e.Clock.Now(), Owner: domain.Owner{Kind: "pool", ID: "local"}, OrgID: "acme", Credential: domain.CredentialNode,
		Pool: "local", Hash: "nodecredhash"}
	if err := e.Store.PutKey(ctx, node); err != nil {
		t.Fatal(err)
	}
	cli, err := keys.NewService(e.Store, e.Clock).CreateToken(ctx, admin, "laptop", "cli")
	if err != nil {
		t.Fatal(err)
	}

	if r := e.Do(http.MethodDelete, "/v1/keys/"+cli.APIKey.ID, apitest.AliceToken, nil); r.Status != 200 || len(closed) != 0 {
		t.Fatalf("revoke a CLI token: %d, closer called %d times", r.Status, len(closed))
	}
	if r := e.Do(http.MethodDelete, "/v1/keys/key_nodecred", apitest.AliceToken, nil); r.Status != 200 {
		t.Fatalf("revoke the node credential: %d %s", r.Status, r.Body)
	}
	if len(closed) != 1 || closed[0].ID != "key_nodecred" || closed[0].Pool != "local" || closed[0].Revoked == nil {
		t.Fatalf("closer called with %+v", closed)
	}
	fail = domain.Unavailable("the table", errors.New("down"))
	if r := e.Do(http.MethodDelete, "/v1/keys/key_nodecred", apitest.AliceToken, nil); r.Status != 503 || len(closed) != 2 {
		t.Fatalf("revoke again with a failing close: %d %s (closer called %d times)", r.Status, r.Body, len(closed))
	}
	if k, err := e.Store.GetKey(ctx, "acme", "key_nodecred"); err != nil || k.Revoked == nil {
		t.Fatalf("key after the failed close: %+v %v", k, err)
	}
}

// Wired as the keys function wires it (apitest.AllRoutes), revoking a node
// credential also where nodes speak only HTTP (no connection to close)
// ends its node: the environment it ran fails with "the node's credential
// was revoked", no tunnel ticket is given for it, and revoking again changes
// nothing.
func TestRevokingANodeCredentialEndsItsNode(t *testing.T) {
	e := apitest.New(t, func(e *apitest.Env) [][]httpapi.Route { return apitest.AllRoutes(e, nil) })
	var issued struct {
		Token  string `json:"token"`
		APIKey struct {
			ID string `json:"id"`
		} `json:"apiKey"`
	}
	if r := e.Do(http.MethodPost, "/v1/nodes/credentials", apitest.AliceToken, map[string]any{"pool": "local", "name": "rack"}); r.Status != 201 {
		t.Fatalf("issue: %d %s", r.Status, r.Body)
	} else {
		r.JSON(t, &issued)
	}
	var reg nodes.Registered
	if r := e.Do(http.MethodPost, "/v1/nodes", issued.Token, map[string]any{"name": "n", "address": "127.0.0.1", "capacity": 2, "tunnelURL": "ws://127.0.0.1:7443/tunnel"}); r.Status != 201 {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	} else {
		r.JSON(t, &reg)
	}
	var leased struct {
		Environment domain.Environment `json:"environment"`
	}
	if r := e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{"template": "shell"}); r.Status != 201 {
		t.Fatalf("lease: %d %s", r.Status, r.Body)
	} else {
		r.JSON(t, &leased)
	}
	env := leased.Environment
	node := "/v1/nodes/" + reg.Node.ID
	if r := e.Do(http.MethodPost, node+"/claim?wait=1s", issued.Token, nil); r.Status != 200 {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	if r := e.Do(http.MethodPost, node+"/environments/"+env.ID+"/report", issued.Token,
		map[string]any{"state": "ready", "exports": []map[string]string{{"service": "web", "target": "127.0.0.1:8080"}}}); r.Status != 200 {
		t.Fatalf("ready: %d %s", r.Status, r.Body)
	}
	tunnel := "/v1/environments/" + env.ID + "/tunnel"
	if r := e.Do(http.MethodPost, tunnel, apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("tunnel before the revoke: %d %s", r.Status, r.Body)
	}

	for _, when := range []string{"after the revoke", "after revoking again"} {
		if r := e.Do(http.MethodDelete, "/v1/keys/"+issued.APIKey.ID, apitest.AliceToken, nil); r.Status != 200 {
			t.Fatalf("revoke (%s): %d %s", when, r.Status, r.Body)
		}
		var got domain.Environment
		e.Do(http.MethodGet, "/v1/environments/"+env.ID, apitest.BobToken, nil).JSON(t, &got)
		if got.State != domain.StateFailed || got.Error != nodes.ErrorNodeRevoked || got.StopReason != nodes.StopRevoked {
			t.Fatalf("%s: %s %q %q", when, got.State, got.Error, got.StopReason)
		}
		if r := e.Do(http.MethodPost, tunnel, apitest.BobToken, nil); r.Status != 409 {
			t.Fatalf("tunnel %s: %d %s", when, r.Status, r.Body)
		}
		n, err := e.Store.GetNode(context.Background(), "acme", reg.Node.ID)
		if err != nil || n.State != domain.NodeLost || len(n.TunnelKey) != 0 {
			t.Fatalf("node %s: %s %v", when, n.State, err)
		}
		e.Clock.Advance(time.Second)
	}
}
