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

// The Lambda entry: the sample payload goes through the same adapter the
// Lambda uses, into the real handler, against minidyn.
func TestLambdaCreateToken(t *testing.T) {
	e := apitest.New(t, nil)
	proxy := apitest.CheckedProxy(t, httpadapter.NewV2(handler(e.Store, e.Clock, e.Log)).ProxyWithContext)

	var ev events.APIGatewayV2HTTPRequest
	apitest.Event(t, "tokens-create.json", &ev)
	res, err := proxy(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 201 || res.Headers["Content-Type"] != "application/json" || res.Headers["Cache-Control"] != "no-store" {
		t.Fatalf("status %d headers %v body %s", res.StatusCode, res.Headers, res.Body)
	}
	if res.Headers["X-Request-Id"] != ev.RequestContext.RequestID {
		t.Errorf("request id %q, want API Gateway's %q", res.Headers["X-Request-Id"], ev.RequestContext.RequestID)
	}
	var out struct {
		Token  string         `json:"token"`
		APIKey map[string]any `json:"apiKey"`
	}
	if err := json.Unmarshal([]byte(res.Body), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.Token, "els_cli_") || out.APIKey["name"] != "laptop" || out.APIKey["createdBy"] != "alice" {
		t.Fatalf("body %s", res.Body)
	}

	// Failed attempts are counted against API Gateway's sourceIp, not the
	// client's X-Forwarded-For.
	ev.Headers["authorization"] = "Bearer els_cli_wrongwrongwrongwrongwrong"
	// The tenth failure is itself a 401; the block starts after it.
	for i := 0; i < 10; i++ {
		if res, _ = proxy(context.Background(), ev); res.StatusCode != 401 {
			t.Fatalf("attempt %d: %d", i+1, res.StatusCode)
		}
	}
	if res, _ = proxy(context.Background(), ev); res.StatusCode != 429 || res.Headers["Retry-After"] == "" {
		t.Fatalf("11th attempt: %d %v", res.StatusCode, res.Headers)
	}
	ev.RequestContext.HTTP.SourceIP = "198.51.100.24"
	ev.Headers["authorization"] = "Bearer " + apitest.AliceToken
	if res, _ = proxy(context.Background(), ev); res.StatusCode != 201 {
		t.Fatalf("another source address: %d %s", res.StatusCode, res.Body)
	}
}
