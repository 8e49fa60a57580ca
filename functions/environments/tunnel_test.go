package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/tunnel/ticket"
)

// The tunnel sample goes through the adapter: 404 for the placeholder id,
// 409 while the environment waits for a node, and a ticket the node can
// check once it is ready.
func TestLambdaTunnelTicket(t *testing.T) {
	e := apitest.New(t, nil)
	proxy := apitest.CheckedProxy(t, httpadapter.NewV2(handler(e.Store, e.Clock, e.Log)).ProxyWithContext)
	ctx := context.Background()
	bob := domain.Principal{OrgID: "acme", UserID: "bob", Role: domain.RoleMember, Credential: domain.CredentialCLI}
	leased, err := environments.NewService(e.Store, e.Clock).Lease(ctx, bob, environments.LeaseRequest{Template: "shell"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var l environments.Leased
	if err := json.Unmarshal(leased.Body, &l); err != nil {
		t.Fatal(err)
	}
	id := l.Environment.ID

	if res, _ := proxy(ctx, event(t, "environments-tunnel", "")); res.StatusCode != 404 {
		t.Fatalf("the placeholder id: %d %s", res.StatusCode, res.Body)
	}
	if res, _ := proxy(ctx, event(t, "environments-tunnel", id)); res.StatusCode != 409 {
		t.Fatalf("pending: %d %s", res.StatusCode, res.Body)
	}

	// A node runs it.
	svc := nodes.NewService(e.Store, nil, e.Clock, nodes.Options{})
	admin := domain.Principal{OrgID: "acme", UserID: "alice", Role: domain.RoleAdmin, Credential: domain.CredentialCLI}
	issued, err := svc.IssueCredential(ctx, admin, "local", "rack-1")
	if err != nil {
		t.Fatal(err)
	}
	node := domain.Principal{OrgID: "acme", KeyID: issued.APIKey.ID, Credential: domain.CredentialNode, Pool: "local"}
	reg, err := svc.Register(ctx, node, nodes.RegisterRequest{Address: "10.0.3.7", Capacity: 1, TunnelURL: "ws://10.0.3.7:7443/tunnel"})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := svc.Claim(ctx, node, reg.Node.ID, 0); err != nil || c == nil {
		t.Fatalf("claim: %v %v", c, err)
	}
	if _, err := svc.ReportState(ctx, node, reg.Node.ID, id, nodes.Report{State: domain.StateReady, Exports: []nodes.ExportTarget{{Service: "web", Target: "10.0.3.7:8080"}}}); err != nil {
		t.Fatal(err)
	}

	res, _ := proxy(ctx, event(t, "environments-tunnel", id))
	if res.StatusCode != 200 || res.Headers["Cache-Control"] != "no-store" {
		t.Fatalf("ready: %d %v %s", res.StatusCode, res.Headers, res.Body)
	}
	tk := decodeInto[environments.Tunnel](t, res.Body)
	key, _ := base64.RawURLEncoding.DecodeString(reg.TunnelKey)
	c, err := ticket.Verify(key, tk.Ticket, e.Clock.Now())
	if err != nil || tk.URL != "ws://10.0.3.7:7443/tunnel" || c.Env != id || c.Node != reg.Node.ID || !c.Allows("10.0.3.7:8080") {
		t.Fatalf("ticket %+v: %+v %v", tk, c, err)
	}
}
