package nodes_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// putTemplates adds templates with special needs to acme's pool local:
// arm (a process on linux/arm64 only) and boxed (a container on any platform).
func putTemplates(t *testing.T, e *apitest.Env) {
	t.Helper()
	base := domain.Template{Command: []string{"sleep", "60"}, Pools: []string{"local"},
		Timeouts: domain.Timeouts{Idle: domain.Duration(time.Minute), Hard: domain.Duration(time.Hour)}, Quota: domain.Quota{MaxLeases: 20}}
	arm := base
	arm.Name, arm.Platforms = "arm", []string{"linux/arm64"}
	boxed := base
	boxed.Name, boxed.Runtime, boxed.Image = "boxed", domain.RuntimeContainer, &domain.Image{Ref: "registry.example/tool:1"}
	for _, tpl := range []domain.Template{arm, boxed} {
		if err := tpl.ValidateRuntime(); err != nil {
			t.Fatal(err)
		}
		if err := e.Store.PutTemplate(context.Background(), "acme", tpl); err != nil {
			t.Fatal(err)
		}
	}
}

func registerAs(t *testing.T, e *env, token, platform string, runtimes []string, capacity int) domain.Node {
	t.Helper()
	r := e.Do("POST", "/v1/nodes", token, map[string]any{"name": platform, "address": "127.0.0.1", "capacity": capacity,
		"platform": platform, "runtimes": runtimes})
	if r.Status != 201 {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	var out nodes.Registered
	r.JSON(t, &out)
	return out.Node
}

func TestRegistrationStatesPlatformAndRuntimes(t *testing.T) {
	e := newEnv(t)
	tok := e.credential(t, apitest.AliceToken, "local")
	for _, c := range []struct{ body, field string }{
		{`{"address":"10.0.0.1","capacity":1,"platform":"amd64"}`, "platform"},
		{`{"address":"10.0.0.1","capacity":1,"platform":"Linux/AMD64"}`, "platform"},
		{`{"address":"10.0.0.1","capacity":1,"runtimes":["vm"]}`, "runtimes[0]"},
		{`{"address":"10.0.0.1","capacity":1,"runtimes":["process","process"]}`, "runtimes[1]"},
	} {
		r := e.Do("POST", "/v1/nodes", tok, c.body)
		var b struct{ Error, Code, Field string }
		r.JSON(t, &b)
		if r.Status != 422 || b.Field != c.field {
			t.Errorf("%s: %d %s", c.body, r.Status, r.Body)
		}
	}
	n := registerAs(t, e, tok, "linux/arm64", []string{"process", "container"}, 1)
	if n.Platform != "linux/arm64" || strings.Join(n.Runtimes, ",") != "process,container" {
		t.Fatalf("registered %+v", n)
	}
	// Stated nothing: process, on a platform taken as any.
	legacy := registerAs(t, e, tok, "", nil, 1)
	var list struct{ Nodes []domain.Node }
	e.Do("GET", "/v1/nodes", apitest.AliceToken, nil).JSON(t, &list)
	got := map[string]string{}
	for _, x := range list.Nodes {
		got[x.ID] = x.Platform + " " + strings.Join(x.Runtimes, ",")
	}
	if got[n.ID] != "linux/arm64 process,container" || got[legacy.ID] != " process" {
		t.Fatalf("listed %v", got)
	}
}

// A node claims only what it can run, and work it cannot run never hides
// work it can: more pending arm environments than a claim's look reads are
// leased before a plain one, and the amd64 node still gets the plain one.
func TestClaimMatchesPlatformAndRuntime(t *testing.T) {
	e := newEnv(t)
	putTemplates(t, e.Env)
	tok := e.credential(t, apitest.AliceToken, "local")
	amd := registerAs(t, e, tok, "linux/amd64", []string{"process"}, 20)
	arm := registerAs(t, e, tok, "linux/arm64", []string{"process", "container"}, 20)

	armEnvs := map[string]bool{}
	for range 12 {
		armEnvs[e.lease(t, apitest.AliceToken, map[string]any{"template": "arm"})] = true
		e.Clock.Advance(time.Millisecond)
	}
	plain := e.lease(t, apitest.AliceToken, map[string]any{"template": "sleeper"})
	e.Clock.Advance(time.Millisecond)
	boxed := e.lease(t, apitest.AliceToken, map[string]any{"template": "boxed"})

	c, r := e.claim(t, tok, amd.ID, "0s")
	if c == nil || c.Environment.ID != plain {
		t.Fatalf("amd64 process node claimed %d %s, want %s", r.Status, r.Body, plain)
	}
	if c, r := e.claim(t, tok, amd.ID, "0s"); c != nil || r.Status != 204 {
		t.Fatalf("amd64 process node claimed what it cannot run: %d %s", r.Status, r.Body)
	}
	for _, id := range []string{boxed} {
		if st := e.get(t, apitest.AliceToken, id).State; st != domain.StatePending {
			t.Fatalf("%s is %s, want pending", id, st)
		}
	}
	// The arm64 node with a container runtime takes the rest, oldest first.
	claimed := map[string]bool{}
	for range 13 {
		c, r := e.claim(t, tok, arm.ID, "0s")
		if c == nil {
			t.Fatalf("arm64 node: %d %s", r.Status, r.Body)
		}
		claimed[c.Environment.ID] = true
		if c.Environment.ID == boxed && (c.Template.Image == nil || c.Template.Image.Ref != "registry.example/tool:1") {
			t.Fatalf("claimed container template without its image: %+v", c.Template)
		}
	}
	for id := range armEnvs {
		if !claimed[id] {
			t.Fatalf("arm environment %s not claimed", id)
		}
	}
	if !claimed[boxed] {
		t.Fatalf("container environment %s not claimed", boxed)
	}
}

// On the node protocol a lease wakes only a node that can run it, and a node
// that claims an environment it cannot run by name is refused, saying why.
func TestOfferAndNamedClaimMatchTheNode(t *testing.T) {
	se := newSocketEnv(t)
	putTemplates(t, se.Env)
	tok := se.credential(t, apitest.AliceToken, "local")
	hello := func(conn nodes.ConnectionID, platform string, runtimes []string) string {
		r := se.send(t, conn, tok, nodes.Message{Type: nodes.MsgHello, ID: "1", Register: &nodes.RegisterRequest{
			Name: "n", Address: "127.0.0.1", Capacity: 4, Platform: platform, Runtimes: runtimes}})
		if r.Type != nodes.MsgRegistered {
			t.Fatalf("hello: %+v", r)
		}
		return r.Registered.Node.ID
	}
	amd := hello("c-amd", "linux/amd64", []string{"process"})
	hello("c-arm", "linux/arm64", []string{"process", "container"})
	se.poster.taken()

	var ids []string
	for range 6 {
		ids = append(ids, se.lease(t, apitest.AliceToken, map[string]any{"template": "boxed"}))
	}
	got := offered(se.poster.taken())
	if len(got["c-amd"]) != 0 || len(got["c-arm"]) != len(ids) {
		t.Fatalf("offers %v, want all %d on c-arm", got, len(ids))
	}
	r := se.send(t, "c-amd", tok, nodes.Message{Type: nodes.MsgClaim, ID: "2", Node: amd, Environment: ids[0]})
	if r.Type != nodes.MsgError || r.Error.Status != 409 || !strings.Contains(r.Error.Message, "needs runtime container") ||
		!strings.Contains(r.Error.Message, "offers runtimes process on linux/amd64") {
		b, _ := json.Marshal(r)
		t.Fatalf("named claim by a node that cannot run it: %s", b)
	}
	if st := se.get(t, apitest.AliceToken, ids[0]).State; st != domain.StatePending {
		t.Fatalf("refused claim left %s", st)
	}
}

// A claimed container environment whose image is an artifact carries a
// signed link to it; one whose artifact expired since the lease is failed,
// saying which.
func TestClaimCarriesImageLink(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sealed := apitest.Start.Add(-time.Hour)
	art := domain.Artifact{
		ID: "art_img1", Name: "tool.tar", Size: 10, SHA256: strings.Repeat("b", 64), ContentType: domain.ImageLayoutContentType,
		KeyVersion: 1, CreatedBy: "alice", Created: sealed, Expires: apitest.Start.Add(30 * time.Minute),
		State: domain.ArtifactSealed, Sealed: &sealed, OrgID: "acme", Key: "orgs/acme/artifacts/art_img1/data",
		Labels: map[string]string{}, Segments: []domain.Segment{{Name: "data", Size: 10, Objects: 1}}, Chunks: 1, SealedBytes: 10,
	}
	open := art
	open.State = domain.ArtifactOpen
	if err := e.Store.PutArtifact(ctx, open); err != nil {
		t.Fatal(err)
	}
	if err := e.Store.SealArtifact(ctx, art); err != nil {
		t.Fatal(err)
	}
	tpl := domain.Template{Name: "boxed-art", Command: []string{"sleep", "60"}, Pools: []string{"local"}, Runtime: domain.RuntimeContainer,
		Image: &domain.Image{Artifact: "art_img1"}, Timeouts: domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(6 * time.Hour)},
		Quota: domain.Quota{MaxLeases: 5}}
	if err := e.Store.PutTemplate(ctx, "acme", tpl); err != nil {
		t.Fatal(err)
	}
	tok := e.credential(t, apitest.AliceToken, "local")
	node := registerAs(t, e, tok, "linux/amd64", []string{"container"}, 4)

	first := e.lease(t, apitest.BobToken, map[string]any{"template": "boxed-art"})
	c, r := e.claim(t, tok, node.ID, "0s")
	if c == nil || c.Environment.ID != first || c.Image == nil || c.Image.ID != "art_img1" || !strings.Contains(c.Image.URL, art.Key) ||
		c.Image.SHA256 != art.SHA256 || c.Image.ContentType != domain.ImageLayoutContentType {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}

	second := e.lease(t, apitest.BobToken, map[string]any{"template": "boxed-art"})
	e.Clock.Advance(31 * time.Minute)
	if c, r := e.claim(t, tok, node.ID, "0s"); c != nil {
		t.Fatalf("claimed with an expired image: %s", r.Body)
	}
	got := e.get(t, apitest.BobToken, second)
	if got.State != domain.StateFailed || !strings.Contains(got.Error, `image.artifact "art_img1" of template "boxed-art"`) {
		t.Fatalf("after its image expired: %s %q", got.State, got.Error)
	}
}
