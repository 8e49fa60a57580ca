package main

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/apitest"
)

// The sample payload goes through the adapter the Lambda uses, into the real
// handler, against minidyn loaded with the test configuration.
func TestLambdaListQuotas(t *testing.T) {
	e := apitest.New(t, nil)
	proxy := apitest.CheckedProxy(t, httpadapter.NewV2(handler(e.Store, e.Clock, e.Log)).ProxyWithContext)
	var ev events.APIGatewayV2HTTPRequest
	apitest.Event(t, "quotas-list.json", &ev)
	res, err := proxy(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"quotas":[{"template":"shell","maxLeases":2,"running":0,"idle":"30m","hard":"6h"},` +
		`{"template":"sleeper","maxLeases":3,"running":0,"idle":"10m","hard":"1h"}]}`
	if res.StatusCode != 200 || res.Headers["Content-Type"] != "application/json" || strings.TrimSpace(res.Body) != want {
		t.Fatalf("status %d headers %v body %s", res.StatusCode, res.Headers, res.Body)
	}
}
