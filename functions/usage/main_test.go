package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
)

// The sample request goes through the adapter the Lambda uses, into the real
// handler, against minidyn: a stopped and a live environment show up as
// seconds of their template on the test's day.
func TestLambdaUsage(t *testing.T) {
	e := apitest.New(t, nil)
	ctx := context.Background()
	envs := environments.NewService(e.Store, e.Clock)
	bob := domain.Principal{OrgID: "acme", UserID: "bob", Role: domain.RoleMember}
	res, err := envs.Lease(ctx, bob, environments.LeaseRequest{Template: "sleeper"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var leased struct {
		Environment struct {
			ID string `json:"id"`
		} `json:"environment"`
	}
	if err := json.Unmarshal(res.Body, &leased); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(5 * time.Minute)
	if _, err := envs.Delete(ctx, bob, leased.Environment.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := envs.Lease(ctx, bob, environments.LeaseRequest{Template: "shell"}, ""); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(time.Minute)

	var ev events.APIGatewayV2HTTPRequest
	apitest.Event(t, "usage-get.json", &ev)
	proxy := apitest.CheckedProxy(t, httpadapter.NewV2(handler(e.Store, e.Clock, e.Log)).ProxyWithContext)
	out, err := proxy(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"since":"2026-03-14T00:00:00Z","usage":[{"template":"shell","day":"2026-03-14","seconds":60},{"template":"sleeper","day":"2026-03-14","seconds":300}]}` + "\n"
	if out.StatusCode != 200 || out.Body != want {
		t.Fatalf("usage: %d %s\nwant %s", out.StatusCode, out.Body, want)
	}
}
