package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/apitest"
)

// The sample payload goes through the adapter the Lambda uses, into the real
// handler, against minidyn loaded with the test configuration.
func TestLambdaListTemplates(t *testing.T) {
	e := apitest.New(t, nil)
	proxy := apitest.CheckedProxy(t, httpadapter.NewV2(handler(e.Store, e.Clock, e.Log)).ProxyWithContext)
	var ev events.APIGatewayV2HTTPRequest
	apitest.Event(t, "templates-list.json", &ev)
	res, err := proxy(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Headers["Content-Type"] != "application/json" || res.Headers["X-Request-Id"] != ev.RequestContext.RequestID {
		t.Fatalf("status %d headers %v body %s", res.StatusCode, res.Headers, res.Body)
	}
	var out struct {
		Templates []struct {
			Name     string `json:"name"`
			Timeouts struct {
				Idle string `json:"idle"`
			} `json:"timeouts"`
		} `json:"templates"`
		Pools []string `json:"pools"`
	}
	if err := json.Unmarshal([]byte(res.Body), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Templates) != 2 || out.Templates[0].Name != "shell" || out.Templates[0].Timeouts.Idle != "30m" || len(out.Pools) != 1 || out.Pools[0] != "local" {
		t.Fatalf("body %s", res.Body)
	}
	// Without a token: 401 through the adapter too.
	delete(ev.Headers, "authorization")
	if res, _ = proxy(context.Background(), ev); res.StatusCode != 401 {
		t.Fatalf("no token: %d %s", res.StatusCode, res.Body)
	}
}
