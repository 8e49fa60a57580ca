package keys_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/keys"
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
