package main

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/openapi"
)

func readEvent(t *testing.T, path string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// The Lambda entry: the sample payload goes through the same adapter the
// Lambda uses into the real handler, with no token, and every answer is
// checked against the document it serves.
func TestLambdaOpenAPI(t *testing.T) {
	proxy := httpadapter.NewV2(handler(apitest.DiscardLogger())).ProxyWithContext
	ev := readEvent(t, "../../events/docs-openapi.json")
	res, err := proxy(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	apitest.CheckLambda(t, ev, res)
	want, err := openapi.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Headers["Content-Type"] != "application/json" || res.Body != string(want) {
		t.Fatalf("status %d headers %v body %.200s", res.StatusCode, res.Headers, res.Body)
	}
	if res.Headers["X-Request-Id"] != ev.RequestContext.RequestID {
		t.Errorf("request id %q, want API Gateway's %q", res.Headers["X-Request-Id"], ev.RequestContext.RequestID)
	}

	// As the HTTP API's $default route, it answers paths no group owns with
	// the service's JSON 404.
	ev.RawPath, ev.RequestContext.HTTP.Path, ev.RouteKey = "/v2/nothing", "/v2/nothing", "$default"
	if res, err = proxy(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	apitest.CheckLambda(t, ev, res)
	if res.StatusCode != 404 {
		t.Fatalf("unknown path: %d %s", res.StatusCode, res.Body)
	}
}
