package nodes_test

import (
	"context"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// A rule change is pushed to the node's connection with its version; when
// that push is lost, the node's next beat that writes its deadline reports
// the older version it applies, and the answer names the environment with
// its layer, in the read that beat makes anyway. The beats in between, and
// a node that is up to date, cost what they did.
func TestNetworkPushLostIsSentAgain(t *testing.T) {
	se := newSocketEnv(t)
	ctx := context.Background()
	tpl, err := se.Store.GetTemplate(ctx, "acme", "shell")
	if err != nil {
		t.Fatal(err)
	}
	tpl.Name, tpl.Network = "netbox", domain.NetworkOpen
	if err := se.Store.PutTemplate(ctx, "acme", tpl); err != nil {
		t.Fatal(err)
	}
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 4)
	r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "b1", Node: node})
	deadline := r.Beat.Deadline

	id := se.lease(t, apitest.BobToken, map[string]any{"template": "netbox"})
	if r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "c", Node: node, Environment: id}); r.Claimed == nil {
		t.Fatalf("claim: %+v", r)
	}
	if r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgReport, ID: "r", Node: node, Environment: id,
		Report: &nodes.Report{State: domain.StateReady, Exports: []nodes.ExportTarget{{Service: "web", Target: "127.0.0.1:9000"}}}}); r.Record == nil || r.Record.State != domain.StateReady {
		t.Fatalf("report ready: %+v", r)
	}
	se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "b2", Node: node, Changed: []string{id}, Running: 1, Deadline: deadline})
	se.poster.taken()

	// The change is pushed with the version of the record it wrote; the
	// push is lost (taken from the poster, never delivered).
	p := se.Do("PATCH", "/v1/environments/"+id+"/network", apitest.BobToken, map[string]any{"deny": []string{"*.example.com"}})
	if p.Status != 200 {
		t.Fatalf("PATCH: %d %s", p.Status, p.Body)
	}
	var pushed *domain.EnvNetwork
	for _, x := range se.poster.taken() {
		if x.msg.Type == nodes.MsgNetwork && x.msg.Environment == id {
			pushed = x.msg.Network
		}
	}
	if pushed == nil || pushed.Version == 0 || len(pushed.Deny) != 1 {
		t.Fatalf("pushed: %+v", pushed)
	}
	behind := map[string]int64{id: 0}

	// A beat within the deadline reads nothing, whatever the node reports.
	se.calls.Reset()
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "b3", Node: node, Running: 1, Deadline: deadline, NetVersions: behind})
	if len(r.Beat.Environments) != 0 || se.calls.Total() != 0 {
		t.Fatalf("beat within the deadline: %+v, %d calls (%v)", r.Beat, se.calls.Total(), se.calls.Counts())
	}

	// The beat that writes the deadline: the node's version is behind, so
	// the answer carries the layer again; one read more than that beat's
	// write and template query, the environments' batch read.
	se.Clock.Advance(time.Minute + time.Second)
	se.calls.Reset()
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "b4", Node: node, Running: 1, Deadline: deadline, NetVersions: behind})
	if len(r.Beat.Environments) != 1 || r.Beat.Environments[0].ID != id || r.Beat.Environments[0].Network == nil ||
		r.Beat.Environments[0].Network.Version != pushed.Version || len(r.Beat.Environments[0].Network.Deny) != 1 {
		t.Fatalf("beat of a node behind: %+v", r.Beat)
	}
	if n := se.calls.Counts()["BatchGetItem"]; n != 1 {
		t.Errorf("beat of a node behind: %d batch reads (%v), want 1", n, se.calls.Counts())
	}
	writes := se.calls.Total()
	deadline = r.Beat.Deadline

	// Up to date, the next writing beat names nothing, for that same read.
	se.Clock.Advance(time.Minute + time.Second)
	se.calls.Reset()
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "b5", Node: node, Running: 1, Deadline: deadline,
		NetVersions: map[string]int64{id: pushed.Version}})
	if len(r.Beat.Environments) != 0 || se.calls.Total() != writes {
		t.Fatalf("beat of a node up to date: %+v, %d calls (%v), want %d", r.Beat, se.calls.Total(), se.calls.Counts(), writes)
	}
}
