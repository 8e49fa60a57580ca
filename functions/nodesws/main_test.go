package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

const sampleToken = "els_node_SampleEventsNodeCredential000000000000000"

// recorder records what is posted to and which connections are closed.
type recorder struct {
	posts  []nodes.Message
	closed []nodes.ConnectionID
}

func (r *recorder) Post(_ context.Context, _ nodes.ConnectionID, b []byte) error {
	var m nodes.Message
	_ = json.Unmarshal(b, &m)
	r.posts = append(r.posts, m)
	return nil
}

func (r *recorder) CloseConnection(_ context.Context, c nodes.ConnectionID, _ string) error {
	r.closed = append(r.closed, c)
	return nil
}

func sample(t *testing.T, name string, mutate func(map[string]any)) json.RawMessage {
	t.Helper()
	var ev map[string]any
	apitest.Event(t, "nodesws-"+name+".json", &ev)
	if mutate != nil {
		mutate(ev)
	}
	b, _ := json.Marshal(ev)
	return b
}

// The sample events through the function's handler, against the emulator:
// the $connect authorizer turns the node credential into the connection's
// principal (and refuses a bad one), a message on the connection is
// handled with that principal and answered as the route's response,
// $disconnect forgets the connection, and a scheduled event runs the
// re-offer job until the invocation's deadline is near.
func TestLambdaNodeSocket(t *testing.T) {
	e := apitest.New(t, nil)
	ctx := context.Background()
	if err := e.Store.PutKey(ctx, domain.APIKey{
		ID: "key_samplenode", Kind: "org", Name: "sample", Prefix: auth.DisplayPrefix(sampleToken), CreatedBy: "alice",
		Source: "api", Created: apitest.Start, Owner: domain.Owner{Kind: "pool", ID: "local"}, OrgID: "acme",
		Credential: domain.CredentialNode, Pool: "local", Hash: auth.HashToken(sampleToken),
	}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	f := newFunction(e.Store, nil, rec, e.Clock, e.Log, "wss://ws123.execute-api.eu-west-1.amazonaws.com/nodes")

	out, err := f.handle(ctx, sample(t, "authorize", nil))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(out)
	var pol struct {
		PrincipalID    string `json:"principalId"`
		PolicyDocument struct {
			Statement []struct{ Effect string } `json:"Statement"`
		} `json:"policyDocument"`
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(b, &pol); err != nil || len(pol.PolicyDocument.Statement) != 1 || pol.PolicyDocument.Statement[0].Effect != "Allow" ||
		pol.Context["org"] != "acme" || pol.Context["pool"] != "local" || pol.Context["credential"] != domain.CredentialNode {
		t.Fatalf("authorizer answer: %s", b)
	}
	if _, err := f.handle(ctx, sample(t, "authorize", func(ev map[string]any) {
		ev["headers"].(map[string]any)["Authorization"] = "Bearer els_node_nope"
	})); err == nil || err.Error() != "Unauthorized" {
		t.Fatalf("a bad credential: %v", err)
	}
	if out, err := f.handle(ctx, sample(t, "authorize", func(ev map[string]any) {
		ev["headers"].(map[string]any)["Authorization"] = "Bearer " + apitest.AliceToken
	})); err != nil || !jsonHas(out, `"Effect":"Deny"`) {
		t.Fatalf("a person's credential: %v %v", out, err)
	}

	// The message carries the principal the authorizer gave.
	withContext := func(ev map[string]any) { ev["requestContext"].(map[string]any)["authorizer"] = pol.Context }
	out, err = f.handle(ctx, sample(t, "message", withContext))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		StatusCode int    `json:"statusCode"`
		Body       string `json:"body"`
	}
	b, _ = json.Marshal(out)
	_ = json.Unmarshal(b, &res)
	var m nodes.Message
	if err := json.Unmarshal([]byte(res.Body), &m); err != nil || res.StatusCode != 200 || m.Type != nodes.MsgRegistered || m.ID != "1" ||
		m.Registered.SocketURL != "wss://ws123.execute-api.eu-west-1.amazonaws.com/nodes" {
		t.Fatalf("hello: %s", b)
	}
	if conns, _ := e.Store.PoolConnections(ctx, "acme", "local", "", 10, e.Clock.Now()); len(conns) != 1 || conns[0].ID != "SampleConn0=" {
		t.Fatalf("connections: %+v", conns)
	}
	out, err = f.handle(ctx, sample(t, "message", func(ev map[string]any) {
		withContext(ev)
		rc := ev["requestContext"].(map[string]any)
		rc["routeKey"], rc["eventType"] = "$disconnect", "DISCONNECT"
		delete(ev, "body")
	}))
	if err != nil || !jsonHas(out, `"statusCode":200`) {
		t.Fatalf("disconnect: %v %v", out, err)
	}
	if conns, _ := e.Store.PoolConnections(ctx, "acme", "local", "", 10, e.Clock.Now()); len(conns) != 0 {
		t.Fatalf("connections after disconnect: %+v", conns)
	}

	sctx, cancel := context.WithTimeout(ctx, reofferMargin+ReofferEvery/2)
	defer cancel()
	if out, err := f.handle(sctx, sample(t, "schedule", nil)); err != nil || !jsonHas(out, "done") {
		t.Fatalf("scheduled run: %v %v", out, err)
	}
	if _, err := f.handle(ctx, json.RawMessage(`{"hello":"there"}`)); err == nil {
		t.Fatal("an unknown event was accepted")
	}

	// Once the credential is revoked, a message on a connection it opened
	// is refused: the refusal is posted to the connection (a route response
	// would be sent after the delete, so never), and the connection is
	// deleted. Nothing is recorded for it.
	k, err := e.Store.GetKey(ctx, "acme", "key_samplenode")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.RevokeKey(ctx, k, e.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	rec.posts = nil
	out, err = f.handle(ctx, sample(t, "message", withContext))
	if err != nil || !jsonHas(out, `"statusCode":200`) || jsonHas(out, `"body":"{`) {
		t.Fatalf("hello after the revoke: %v %v", out, err)
	}
	if len(rec.posts) != 1 || rec.posts[0].Type != nodes.MsgError || rec.posts[0].Error.Status != 401 || rec.posts[0].ID != "1" {
		t.Fatalf("posted after the revoke: %+v", rec.posts)
	}
	if len(rec.closed) != 1 || rec.closed[0] != "SampleConn0=" {
		t.Fatalf("closed after the revoke: %v", rec.closed)
	}
	if conns, _ := e.Store.PoolConnections(ctx, "acme", "local", "", 10, e.Clock.Now()); len(conns) != 0 {
		t.Fatalf("connections recorded for a revoked credential: %+v", conns)
	}
}

func jsonHas(v any, s string) bool {
	b, _ := json.Marshal(v)
	return strings.Contains(string(b), s)
}
