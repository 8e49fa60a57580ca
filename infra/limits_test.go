package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/jsii-runtime-go"

	"github.com/envlease/envlease/infra/bundle"
)

// Every group that reserves concurrency gets it on its function, the
// environments and timeout functions and the jobs reserve, the nodes and
// node protocol functions are capped, and the reservations leave the account's default
// 1,000 at least the 100 unreserved executions Lambda requires.
func TestReservedConcurrency(t *testing.T) {
	s := synth(t)
	fns := s.resources("AWS::Lambda::Function")
	total := 0
	for _, g := range Groups {
		p := props(fns[s.FunctionIDs[g.Name]])
		got, _ := p["ReservedConcurrentExecutions"].(float64)
		if int(got) != g.ReservedConcurrency {
			t.Errorf("%s: reserved concurrency %v, want %d", g.Name, p["ReservedConcurrentExecutions"], g.ReservedConcurrency)
		}
		total += g.ReservedConcurrency
	}
	for _, name := range []string{"environments", "timeouts", "lostnodes", "nodes", "nodesws"} {
		if g := groupNamed(t, name); g.ReservedConcurrency <= 0 {
			t.Errorf("%s reserves no concurrency", name)
		}
	}
	if total > 900 {
		t.Errorf("%d executions reserved: the account's default 1,000 must keep 100 unreserved", total)
	}
}

// The node routes and the environment routes have their own limits on the
// stage, apart from the default the other routes share.
func TestRouteThrottles(t *testing.T) {
	s := synth(t)
	seen := 0
	for _, st := range s.resources("AWS::ApiGatewayV2::Stage") {
		p := props(st)
		if ref(p["ApiId"]) != logicalID(s.Stack.Api) {
			continue // the node protocol's WebSocket stage has its own limit
		}
		seen++
		def, _ := p["DefaultRouteSettings"].(map[string]any)
		rs, _ := p["RouteSettings"].(map[string]any)
		for _, name := range []string{"nodes", "environments"} {
			g := groupNamed(t, name)
			if g.Throttle == nil {
				t.Fatalf("%s has no route limit", name)
			}
			for _, r := range g.Routes {
				keys := []string{"ANY " + r.Path}
				if r.Proxy {
					keys = append(keys, "ANY "+r.Path+"/{proxy+}")
				}
				for _, key := range keys {
					got, _ := rs[key].(map[string]any)
					if got["ThrottlingRateLimit"] != g.Throttle.Rate || got["ThrottlingBurstLimit"] != g.Throttle.Burst {
						t.Errorf("route %s: %v, want rate %v burst %v", key, got, g.Throttle.Rate, g.Throttle.Burst)
					}
				}
			}
		}
		if def["ThrottlingRateLimit"] != float64(500) || def["ThrottlingBurstLimit"] != float64(1000) {
			t.Errorf("stage default %v, want the sized 500/1000 of cdk.json", def)
		}
		if n := groupNamed(t, "nodes").Throttle; n.Rate >= groupNamed(t, "environments").Throttle.Rate {
			t.Errorf("node routes may take %v/s, as much as people's", n.Rate)
		}
	}
	if seen != 1 {
		t.Errorf("%d stages of the HTTP API, want 1", seen)
	}
}

// envlease:reservedConcurrency=false leaves every reservation out, for an
// account whose quota cannot hold them yet.
func TestReservedConcurrencyCanBeLeftOut(t *testing.T) {
	root, err := bundle.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	dirs := map[string]string{}
	for _, g := range Groups {
		d := filepath.Join(tmp, "stub", g.Name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "bootstrap"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		dirs[g.Name] = d
	}
	app, _, err := newApp(appOptions{Root: root, Outdir: filepath.Join(tmp, "cdk.out"), Groups: Groups, AssetDirs: dirs,
		Context: map[string]interface{}{ctxReserved: false}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(*app.Synth(nil).GetStackByName(jsii.String(StackName)).TemplateFullPath())
	if err != nil {
		t.Fatal(err)
	}
	var tpl struct {
		Resources map[string]struct {
			Type       string
			Properties map[string]any
		}
	}
	if err := json.Unmarshal(raw, &tpl); err != nil {
		t.Fatal(err)
	}
	for id, r := range tpl.Resources {
		if r.Type == "AWS::Lambda::Function" && r.Properties["ReservedConcurrentExecutions"] != nil {
			t.Errorf("%s reserves %v", id, r.Properties["ReservedConcurrentExecutions"])
		}
	}
}

func groupNamed(t *testing.T, name string) Group {
	t.Helper()
	for _, g := range Groups {
		if g.Name == name {
			return g
		}
	}
	t.Fatalf("no group %s", name)
	return Group{}
}
