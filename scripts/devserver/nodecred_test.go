package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/httpapi"
)

// A node credential can do nothing but the node API: every other route the
// stack serves answers it 403, and every node route answers a person's token
// 403. Routes are taken from the groups themselves, so a route added later
// is covered too.
func TestNodeCredentialServesOnlyTheNodeAPI(t *testing.T) {
	base := startDevserver(t)
	alice := api{t: t, base: base, token: apitest.AliceToken}
	var issued struct {
		Token string `json:"token"`
	}
	if s := alice.do("POST", "/v1/nodes/credentials", map[string]any{"pool": "local", "name": "probe"}, &issued); s != 201 || issued.Token == "" {
		t.Fatalf("issue a node credential: %d", s)
	}
	node := api{t: t, base: base, token: issued.Token}
	d := deps{s3: s3.New(s3.Options{Region: "us-east-1"}), bucket: "envlease", clock: clock.System{}}
	checked := 0
	for _, g := range routes(d) {
		for _, rt := range g {
			path := strings.NewReplacer("{id}", "x_probe", "{env}", "env_probe").Replace(rt.Path)
			var body any
			if rt.Method != http.MethodGet && rt.Method != http.MethodDelete {
				body = map[string]any{}
			}
			switch rt.Access {
			case httpapi.Node:
				if s := alice.do(rt.Method, path, body, nil); s != 403 {
					t.Errorf("%s %s with a person's token: %d, want 403", rt.Method, rt.Path, s)
				}
			case httpapi.Member, httpapi.Admin:
				if s := node.do(rt.Method, path, body, nil); s != 403 {
					t.Errorf("%s %s with a node credential: %d, want 403", rt.Method, rt.Path, s)
				}
			default:
				continue
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("only %d routes checked", checked)
	}
}
