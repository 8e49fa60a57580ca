package main

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/apitest"
)

func TestLambdaEvents(t *testing.T) {
	e := apitest.New(t, nil)
	proxy := apitest.CheckedProxy(t, httpadapter.NewV2(handler(e.Store, nil, e.Clock, e.Log)).ProxyWithContext)
	cases := []struct {
		file   string
		status int
		want   string
	}{
		{"keys-create.json", 201, `"kind":"org"`},
		{"keys-list.json", 200, `"keys":[`},
		{"keys-revoke.json", 200, `"revoked":"`},
		{"keys-whoami.json", 200, `"organization":"acme"`},
		{"tokens-create.json", 404, `"code":"not_found"`}, // another group's route
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			var ev events.APIGatewayV2HTTPRequest
			apitest.Event(t, c.file, &ev)
			res, err := proxy(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != c.status || res.Headers["Content-Type"] != "application/json" || !strings.Contains(res.Body, c.want) {
				t.Fatalf("status %d headers %v body %s", res.StatusCode, res.Headers, res.Body)
			}
		})
	}
}
