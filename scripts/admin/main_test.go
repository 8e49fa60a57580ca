package main

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/store"
)

// The admin tool reaches the table only through the SDK's own endpoint
// settings, exactly as it would reach LocalStack.
func TestApplyAndBootstrapThroughEndpointSettings(t *testing.T) {
	d := devstack.NewTestDynamo(t)
	t.Setenv("TABLE_NAME", d.Table)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", d.Endpoint)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", d.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "local")
	ctx := context.Background()

	var out bytes.Buffer
	if err := run(ctx, []string{"apply", filepath.Join("..", "devserver", "demo.json")}, &out); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if !strings.Contains(out.String(), "applied org acme") {
		t.Fatalf("apply said %q", out.String())
	}
	st := store.New(d.Client(ctx), d.Table)
	if ts, err := st.ListTemplates(ctx, "acme"); err != nil || len(ts) == 0 {
		t.Fatalf("templates after apply: %v %v", ts, err)
	}
	// apply never stores the file's plain tokens.
	if ks, err := st.ListKeys(ctx, "acme"); err != nil || len(ks) != 0 {
		t.Fatalf("keys after apply: %d %v", len(ks), err)
	}

	out.Reset()
	if err := run(ctx, []string{"bootstrap", "--org", "initech", "--user", "peter"}, &out); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	token := lines[len(lines)-1]
	if !strings.HasPrefix(token, "els_cli_") {
		t.Fatalf("bootstrap output %q", out.String())
	}
	// The printed token is an admin token of the new organization.
	e := &apitest.Env{T: t, Dynamo: d, Store: st, Clock: apitest.NewClockNow(), RemoteAddr: "192.0.2.9:1"}
	e.Log = apitest.DiscardLogger()
	svc := keys.NewService(st, e.Clock)
	e.Handler = httpapi.New(httpapi.Config{Logger: e.Log, Auth: apitest.NewAuth(e)}, keys.KeyRoutes(svc))
	if r := e.Do(http.MethodPost, "/v1/keys", token, map[string]string{"name": "ci"}); r.Status != http.StatusCreated {
		t.Fatalf("bootstrapped token creating a key: %d %s", r.Status, r.Body)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Setenv("TABLE_NAME", "x")
	for _, args := range [][]string{{}, {"nope"}, {"apply"}, {"bootstrap", "--org", "a"}} {
		if err := run(context.Background(), args, &bytes.Buffer{}); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
