package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/envlease/envlease/shared/apitest"
)

func event(t *testing.T, name, id string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	var ev events.APIGatewayV2HTTPRequest
	apitest.Event(t, name+".json", &ev)
	if id != "" {
		// The samples name a placeholder id; point them at a real one.
		ev.RawPath = strings.Replace(ev.RawPath, "env_000000000000000000000000", id, 1)
		ev.RequestContext.HTTP.Path = ev.RawPath
	}
	return ev
}

// envJSON is the environment: the body of GET, touch and DELETE of one
// environment, and the lease's `environment`.
type envJSON struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	IdleUntil string `json:"idleUntil"`
	Shares    []struct {
		Files []string `json:"files"`
	} `json:"shares"`
}

// leasedBody is the lease's answer: the environment and the sandbox's configuration.
type leasedBody struct {
	Environment envJSON        `json:"environment"`
	Config      map[string]any `json:"config"`
}

func decodeInto[T any](t *testing.T, body string) T {
	t.Helper()
	var b T
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return b
}

// decode reads the body of GET, touch or DELETE of the environment id: the
// environment itself.
func decode(t *testing.T, body, id string) envJSON {
	t.Helper()
	b := decodeInto[envJSON](t, body)
	if b.ID != id {
		t.Fatalf("the body is not environment %s: %s", id, body)
	}
	return b
}

// The sample payloads go through the adapter the Lambda uses, into the real
// handler, against minidyn: lease (and its idempotent retry), list, read,
// touch, delete (twice).
func TestLambdaEnvironments(t *testing.T) {
	e := apitest.New(t, nil)
	proxy := apitest.CheckedProxy(t, httpadapter.NewV2(handler(e.Store, e.Clock, e.Log)).ProxyWithContext)
	ctx := context.Background()

	res, err := proxy(ctx, event(t, "environments-create", ""))
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 201 || res.Headers["Content-Type"] != "application/json" {
		t.Fatalf("lease: %d %v %s", res.StatusCode, res.Headers, res.Body)
	}
	leased := decodeInto[leasedBody](t, res.Body)
	id := leased.Environment.ID
	if leased.Environment.State != "pending" || len(leased.Environment.Shares) != 1 ||
		strings.Join(leased.Environment.Shares[0].Files, ",") != "main.go,docs/readme.md" || leased.Config["environment"] != id {
		t.Fatalf("lease body %s", res.Body)
	}
	// The sample carries an Idempotency-Key: sending it again replays the lease.
	again, _ := proxy(ctx, event(t, "environments-create", ""))
	if again.StatusCode != 201 || again.Body != res.Body || again.Headers["Idempotent-Replayed"] != "true" {
		t.Fatalf("retry: %d %v %s", again.StatusCode, again.Headers, again.Body)
	}

	res, _ = proxy(ctx, event(t, "environments-list", ""))
	var list struct {
		Environments []map[string]any `json:"environments"`
	}
	if err := json.Unmarshal([]byte(res.Body), &list); err != nil || res.StatusCode != 200 || len(list.Environments) != 1 || list.Environments[0]["id"] != id {
		t.Fatalf("list: %d %s", res.StatusCode, res.Body)
	}

	if res, _ = proxy(ctx, event(t, "environments-get", "")); res.StatusCode != 404 || !strings.Contains(res.Body, `"code":"not_found"`) {
		t.Fatalf("get of the placeholder id: %d %s", res.StatusCode, res.Body)
	}
	if res, _ = proxy(ctx, event(t, "environments-get", id)); res.StatusCode != 200 || decode(t, res.Body, id).ID != id {
		t.Fatalf("get: %d %s", res.StatusCode, res.Body)
	}

	e.Clock.Advance(10 * time.Minute)
	res, _ = proxy(ctx, event(t, "environments-touch", id))
	if res.StatusCode != 200 || decode(t, res.Body, id).IdleUntil != "2026-03-14T09:40:00Z" {
		t.Fatalf("touch: %d %s", res.StatusCode, res.Body)
	}

	for i := 0; i < 2; i++ {
		res, _ = proxy(ctx, event(t, "environments-delete", id))
		if res.StatusCode != 200 || decode(t, res.Body, id).State != "stopped" {
			t.Fatalf("delete %d: %d %s", i, res.StatusCode, res.Body)
		}
	}
	if res, _ = proxy(ctx, event(t, "environments-touch", id)); res.StatusCode != 410 {
		t.Fatalf("touch after delete: %d %s", res.StatusCode, res.Body)
	}
}
