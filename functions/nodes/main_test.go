package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
)

// The node credential, node and environment the sample events name.
const (
	sampleToken = "els_node_SampleEventsNodeCredential000000000000000"
	sampleNode  = "node_000000000000000000000000"
	sampleEnv   = "env_000000000000000000000000"
)

func event(t *testing.T, name, node, env string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	var ev events.APIGatewayV2HTTPRequest
	apitest.Event(t, "nodes-"+name+".json", &ev)
	// The samples name placeholders; point them at the real ones.
	ev.RawPath = strings.NewReplacer(sampleNode, node, sampleEnv, env).Replace(ev.RawPath)
	ev.RequestContext.HTTP.Path = ev.RawPath
	ev.Body = strings.ReplaceAll(ev.Body, sampleEnv, env)
	return ev
}

// The sample payloads go through the adapter the Lambda uses, into the real
// handler, against minidyn: issue a credential, register (with the sample
// events' credential), claim a pending lease, report ready, heartbeat, list,
// deregister.
func TestLambdaNodes(t *testing.T) {
	e := apitest.New(t, nil)
	ctx := context.Background()
	// The credential the node events carry, as an admin would have issued it.
	if err := e.Store.PutKey(ctx, domain.APIKey{
		ID: "key_samplenode", Kind: "org", Name: "sample", Prefix: auth.DisplayPrefix(sampleToken), CreatedBy: "alice",
		Source: "api", Created: apitest.Start, Owner: domain.Owner{Kind: "pool", ID: "local"}, OrgID: "acme",
		Credential: domain.CredentialNode, Pool: "local", Hash: auth.HashToken(sampleToken),
	}); err != nil {
		t.Fatal(err)
	}
	proxy := apitest.CheckedProxy(t, httpadapter.NewV2(handler(e.Store, nil, nil, e.Clock, e.Log, "")).ProxyWithContext)
	call := func(ev events.APIGatewayV2HTTPRequest, want int) string {
		t.Helper()
		res, err := proxy(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != want {
			t.Fatalf("%s %s: %d %s", ev.RequestContext.HTTP.Method, ev.RawPath, res.StatusCode, res.Body)
		}
		return res.Body
	}

	if body := call(event(t, "credentials-create", "", ""), 201); !strings.Contains(body, `"token":"els_node_`) {
		t.Fatalf("credential: %s", body)
	}
	var reg struct {
		Node struct {
			ID string `json:"id"`
		} `json:"node"`
	}
	if err := json.Unmarshal([]byte(call(event(t, "register", "", ""), 201)), &reg); err != nil || reg.Node.ID == "" {
		t.Fatalf("register: %v", err)
	}
	node := reg.Node.ID

	// Nothing pending: the claim waits its second and answers 204.
	call(event(t, "claim", node, ""), 204)
	bob := domain.Principal{OrgID: "acme", UserID: "bob", Role: domain.RoleMember, Credential: domain.CredentialCLI}
	leased, err := environments.NewService(e.Store, e.Clock).Lease(ctx, bob, environments.LeaseRequest{Template: "shell"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var l environments.Leased
	if err := json.Unmarshal(leased.Body, &l); err != nil {
		t.Fatal(err)
	}
	env := l.Environment.ID
	if body := call(event(t, "claim", node, ""), 200); !strings.Contains(body, `"id":"`+env+`"`) || !strings.Contains(body, `"state":"starting"`) {
		t.Fatalf("claim: %s", body)
	}
	if body := call(event(t, "report", node, env), 200); !strings.Contains(body, `"state":"ready"`) || !strings.Contains(body, "10.0.3.7:41234") {
		t.Fatalf("report: %s", body)
	}
	if body := call(event(t, "heartbeat", node, env), 200); !strings.Contains(body, `"state":"ready"`) {
		t.Fatalf("heartbeat: %s", body)
	}
	if body := call(event(t, "list", "", ""), 200); !strings.Contains(body, node) {
		t.Fatalf("list: %s", body)
	}
	if body := call(event(t, "deregister", node, ""), 200); !strings.Contains(body, `"state":"left"`) {
		t.Fatalf("deregister: %s", body)
	}
	got, err := e.Store.GetEnvironment(ctx, "acme", env)
	if err != nil || got.State != domain.StateFailed || got.Error != "node left the pool" {
		t.Fatalf("after deregister: %+v %v", got, err)
	}
	// The placeholder node of the samples is nobody's: 404.
	call(event(t, "heartbeat", sampleNode, env), 404)
}
