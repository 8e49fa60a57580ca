package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/apitest"
)

func event(t *testing.T, name string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	var ev events.APIGatewayV2HTTPRequest
	apitest.Event(t, name+".json", &ev)
	return ev
}

// The sample payloads go through the adapter the Lambda uses, into the real
// handler, against minidyn: register, list, read, redeem twice.
func TestLambdaSandboxes(t *testing.T) {
	e := apitest.New(t, nil)
	proxy := apitest.CheckedProxy(t, httpadapter.NewV2(handler(e.Store, e.Clock, e.Log)).ProxyWithContext)
	ctx := context.Background()

	res, err := proxy(ctx, event(t, "sandboxes-create"))
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 201 || res.Headers["Content-Type"] != "application/json" || res.Headers["Cache-Control"] != "no-store" {
		t.Fatalf("create: %d %v %s", res.StatusCode, res.Headers, res.Body)
	}
	var created struct {
		Sandbox struct {
			ID, Name, CreatedBy string
		} `json:"sandbox"`
		JoinKey string `json:"joinKey"`
	}
	if err := json.Unmarshal([]byte(res.Body), &created); err != nil {
		t.Fatal(err)
	}
	if created.Sandbox.Name != "alice-laptop" || created.Sandbox.CreatedBy != "alice" || !strings.HasPrefix(created.JoinKey, "els_join_") {
		t.Fatalf("create body %s", res.Body)
	}
	if res.Headers["Location"] != "/v1/sandboxes/"+created.Sandbox.ID {
		t.Fatalf("Location %q", res.Headers["Location"])
	}

	res, _ = proxy(ctx, event(t, "sandboxes-list"))
	if res.StatusCode != 200 || !strings.Contains(res.Body, created.Sandbox.ID) {
		t.Fatalf("list: %d %s", res.StatusCode, res.Body)
	}

	get := event(t, "sandboxes-get")
	if res, _ = proxy(ctx, get); res.StatusCode != 404 {
		t.Fatalf("get of the sample id: %d %s", res.StatusCode, res.Body)
	}
	get.RawPath = "/v1/sandboxes/" + created.Sandbox.ID
	get.RequestContext.HTTP.Path = get.RawPath
	if res, _ = proxy(ctx, get); res.StatusCode != 200 || !strings.Contains(res.Body, `"joined":null`) {
		t.Fatalf("get: %d %s", res.StatusCode, res.Body)
	}

	join := event(t, "sandboxes-join")
	join.Body = `{"joinKey":"` + created.JoinKey + `"}`
	if res, _ = proxy(ctx, join); res.StatusCode != 200 || strings.Contains(res.Body, `"joined":null`) {
		t.Fatalf("join: %d %s", res.StatusCode, res.Body)
	}
	if res, _ = proxy(ctx, join); res.StatusCode != 410 || !strings.Contains(res.Body, `"code":"gone"`) {
		t.Fatalf("second join: %d %s", res.StatusCode, res.Body)
	}
}
