package main

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// The node protocol end to end on the local stack: the embedded agents hold
// one WebSocket each; a lease wakes the pool's node, which claims, runs and
// reports ready over it; a delete reaches it and it reports stopped. Then
// the offers of a lease are lost, and the re-offer job still gets it
// claimed; then every connection drops, the agents reconnect, and leases
// reach them again.
func TestNodeProtocolEndToEnd(t *testing.T) {
	var sockets *nodes.LocalSockets
	base := startDevserverWith(t, func(o *options) { o.sockets = func(l *nodes.LocalSockets) { sockets = l } })
	c := api{t: t, base: base, token: apitest.BobToken}
	agents := 0
	for _, o := range demoOrgs(t) {
		agents += len(o)
	}
	waitUntil(t, "every agent connected", func() bool { return sockets.Connections() == agents })

	lease := func() string {
		t.Helper()
		var leased envAnswer
		if s := c.do("POST", "/v1/environments", map[string]any{"template": "sleeper"}, &leased); s != 201 {
			t.Fatalf("lease: %d", s)
		}
		return leased.Environment.ID
	}
	stop := func(id string) {
		t.Helper()
		if s := c.do("DELETE", "/v1/environments/"+id, nil, nil); s != 200 {
			t.Fatalf("delete: %d", s)
		}
		c.waitState(id, domain.StateStopped, time.Minute)
	}

	t.Run("lease, wake, claim, ready, stop", func(t *testing.T) {
		c.t = t
		id := lease()
		c.waitState(id, domain.StateReady, time.Minute)
		stop(id)
	})

	t.Run("a lost offer is re-offered", func(t *testing.T) {
		c.t = t
		var lost atomic.Int32
		sockets.DropPosts(func(_ nodes.ConnectionID, msg []byte) bool {
			var m nodes.Message
			if json.Unmarshal(msg, &m) == nil && m.Type == nodes.MsgOffer && lost.Load() == 0 {
				lost.Add(1)
				return true
			}
			return false
		})
		defer sockets.DropPosts(nil)
		id := lease()
		c.waitState(id, domain.StateReady, time.Minute)
		if lost.Load() != 1 {
			t.Fatalf("%d offers lost, want 1", lost.Load())
		}
		stop(id)
	})

	t.Run("reconnect after the connections drop", func(t *testing.T) {
		c.t = t
		sockets.CloseAll()
		waitUntil(t, "every agent reconnected", func() bool { return sockets.Connections() == agents })
		id := lease()
		c.waitState(id, domain.StateReady, time.Minute)
		stop(id)
	})
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// demoOrgs are the built-in fixture's organizations' pools.
func demoOrgs(t *testing.T) map[string][]string {
	t.Helper()
	var f struct {
		Orgs []struct {
			ID    string   `json:"id"`
			Pools []string `json:"pools"`
		} `json:"orgs"`
	}
	if err := json.Unmarshal(demoFixture, &f); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, o := range f.Orgs {
		out[o.ID] = o.Pools
	}
	return out
}
