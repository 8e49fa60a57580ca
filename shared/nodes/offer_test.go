package nodes_test

import (
	"context"
	"slices"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/nodes"
)

// A wake never reaches a node short of disk while another connection of
// the sample is there, full or not: a full node runs the environment when
// a slot frees, a short one could only fail it. When every connection is
// short, no node can take it, and one of them gets the offer (its claim
// fails the environment, saying why). A node that says only full (an older
// agent) is chosen as before. The flags are what the nodes' heartbeats
// said, kept on the connection records.
func TestOfferAvoidsNodesShortOfDisk(t *testing.T) {
	yes, no := true, false
	type room struct{ full, short *bool }
	for _, tc := range []struct {
		name  string
		rooms map[nodes.ConnectionID]room
		want  []nodes.ConnectionID
	}{
		{"a full node over a short one", map[nodes.ConnectionID]room{"c1": {&yes, &yes}, "c2": {&yes, &no}}, []nodes.ConnectionID{"c2"}},
		{"a full node of an older agent over a short one", map[nodes.ConnectionID]room{"c1": {&yes, &yes}, "c2": {&yes, nil}}, []nodes.ConnectionID{"c2"}},
		{"a free node over full and short ones", map[nodes.ConnectionID]room{"c1": {&yes, &yes}, "c2": {&yes, &no}, "c3": {&no, &no}}, []nodes.ConnectionID{"c3"}},
		{"every node short", map[nodes.ConnectionID]room{"c1": {&yes, &yes}, "c2": {&yes, &yes}}, []nodes.ConnectionID{"c1", "c2"}},
		{"no longer short", map[nodes.ConnectionID]room{"c1": {&yes, &no}, "c2": {&yes, &no}}, []nodes.ConnectionID{"c1", "c2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			se := newSocketEnv(t)
			ctx := context.Background()
			tok := se.credential(t, apitest.AliceToken, "local")
			for c, r := range tc.rooms {
				node := se.hello(t, c, tok, 1)
				if r.short != nil && !*r.short {
					// Short first, then no longer: the record follows.
					se.send(t, c, tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "s", Node: node, Short: &yes})
				}
				if b := se.send(t, c, tok, nodes.Message{Type: nodes.MsgHeartbeat, ID: "b", Node: node, Full: r.full, Short: r.short}); b.Type != nodes.MsgBeat {
					t.Fatalf("beat on %s: %+v", c, b)
				}
			}
			conns, err := se.Store.PoolConnections(ctx, "acme", "local", "", 10, se.Clock.Now())
			if err != nil || len(conns) != len(tc.rooms) {
				t.Fatalf("connections: %+v %v", conns, err)
			}
			for _, c := range conns {
				r := tc.rooms[nodes.ConnectionID(c.ID)]
				if c.Full != (r.full != nil && *r.full) || c.Short != (r.short != nil && *r.short) {
					t.Fatalf("connection %s recorded full %v short %v, want %v %v", c.ID, c.Full, c.Short, r.full, r.short)
				}
			}

			// The lease's offer and enough re-offers that a random choice
			// would have hit every connection.
			id := se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
			for range 24 {
				se.Clock.Advance(nodes.MaxReofferBackoff)
				if _, err := se.offerer.Reoffer(ctx); err != nil {
					t.Fatal(err)
				}
			}
			got := offered(se.poster.taken())
			total := 0
			for c, envs := range got {
				if !slices.Contains(tc.want, c) {
					t.Fatalf("offered to %s: %v, want only %v", c, got, tc.want)
				}
				for _, e := range envs {
					if e != id {
						t.Fatalf("offered %s, want %s", e, id)
					}
				}
				total += len(envs)
			}
			if total != 25 {
				t.Fatalf("%d offers, want 25: %v", total, got)
			}
			if len(tc.want) > 1 && len(got) < 2 {
				t.Logf("every offer to one of %v (random): %v", tc.want, got)
			}
		})
	}
}
