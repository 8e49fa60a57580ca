package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// roomFor raises the quota of acme's sleeper to n live environments.
func (se *socketEnv) roomFor(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	tpl, err := se.Store.GetTemplate(ctx, "acme", "sleeper")
	if err != nil {
		t.Fatal(err)
	}
	tpl.Quota.MaxLeases = n
	if err := se.Store.PutTemplate(ctx, "acme", tpl); err != nil {
		t.Fatal(err)
	}
}

func (se *socketEnv) leaseMany(t *testing.T, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = se.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	}
	return ids
}

// A batch claim of n offered environments costs one transaction for all of
// them and a fixed four calls beside it, whatever n is: the node (with its
// credential), what it runs, one batch read of the offered ones, and their
// template once. The lease's own calls are pinned the same way
// (TestLeaseIsAuthReadPlusOneTransaction).
func TestBatchClaimCalls(t *testing.T) {
	for _, n := range []int{1, 4, 16, nodes.MaxClaimBatch} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			se := newSocketEnv(t)
			se.roomFor(t, 100)
			tok := se.credential(t, apitest.AliceToken, "local")
			node := se.hello(t, "c1", tok, 100)
			ids := se.leaseMany(t, n)
			se.calls.Reset()
			r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "b", Node: node, Environments: ids, Max: n})
			if r.Type != nodes.MsgClaimed || len(r.Claims) != n {
				t.Fatalf("batch claim of %d: %d claimed (%+v)", n, len(r.Claims), r.Error)
			}
			got := map[string]bool{}
			for _, c := range r.Claims {
				if c.Environment.State != domain.StateStarting || c.Environment.Node != node || c.Template.Name != "sleeper" || got[c.Environment.ID] {
					t.Fatalf("claimed %+v", c.Environment)
				}
				got[c.Environment.ID] = true
			}
			// The node with its credential (one BatchGetItem), what it runs
			// (Query), the offered ones (BatchGetItem), the template (GetItem).
			want := map[string]int{"BatchGetItem": 2, "GetItem": 1, "Query": 1, "TransactWriteItems": 1}
			if counts := se.calls.Counts(); fmt.Sprint(counts) != fmt.Sprint(want) {
				t.Fatalf("calls for a batch of %d: %v, want %v", n, counts, want)
			}
		})
	}
}

// A batch claim takes what the offered ones leave to pending ones, and
// never more than the node's free capacity.
func TestBatchClaimFillsToCapacity(t *testing.T) {
	se := newSocketEnv(t)
	se.roomFor(t, 100)
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 6)
	ids := se.leaseMany(t, 10)
	r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "1", Node: node, Environments: ids[:2], Max: 2})
	if len(r.Claims) != 2 {
		t.Fatalf("first batch: %+v", r)
	}
	// Four of six left: one offered, the rest from what is pending.
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "2", Node: node, Environments: ids[9:], Max: 20})
	if len(r.Claims) != 4 || r.Claims[0].Environment.ID != ids[9] {
		t.Fatalf("second batch: %d claimed, want 4 with %s first", len(r.Claims), ids[9])
	}
	r = se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "3", Node: node, Max: 20})
	if r.Type != nodes.MsgError || r.Error.Status != 409 {
		t.Fatalf("a claim at capacity: %+v", r)
	}
	pending := 0
	for _, id := range ids {
		if se.get(t, apitest.BobToken, id).State == domain.StatePending {
			pending++
		}
	}
	if pending != 4 {
		t.Fatalf("%d pending after claiming 6 of 10", pending)
	}
}

// Nodes claiming the same crowd in batches at once never claim an
// environment twice, and each stays within its capacity.
func TestBatchClaimIsExact(t *testing.T) {
	se := newSocketEnv(t)
	se.roomFor(t, 100)
	tok := se.credential(t, apitest.AliceToken, "local")
	const nodeCount, capacity, envs = 4, 5, 14
	conns := make([]nodes.ConnectionID, nodeCount)
	ids := make([]string, nodeCount)
	for i := range ids {
		conns[i] = nodes.ConnectionID(fmt.Sprintf("c%d", i))
		ids[i] = se.hello(t, conns[i], tok, capacity)
	}
	leased := se.leaseMany(t, envs)
	var wg sync.WaitGroup
	got := make([]nodes.Message, nodeCount)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = se.send(t, conns[i], tok, nodes.Message{Type: nodes.MsgClaim, ID: "x", Node: ids[i], Environments: leased, Max: nodes.MaxClaimBatch})
		}()
	}
	wg.Wait()
	owner := map[string]string{}
	for i, r := range got {
		if r.Type != nodes.MsgClaimed || len(r.Claims) > capacity {
			t.Fatalf("node %d: %+v (%d claims, capacity %d)", i, r.Error, len(r.Claims), capacity)
		}
		for _, c := range r.Claims {
			if prev, twice := owner[c.Environment.ID]; twice {
				t.Fatalf("%s claimed by %s and %s", c.Environment.ID, prev, ids[i])
			}
			owner[c.Environment.ID] = ids[i]
		}
	}
	if len(owner) != envs {
		t.Fatalf("%d of %d environments claimed (capacity %d)", len(owner), envs, nodeCount*capacity)
	}
	for id, n := range owner {
		if e := se.get(t, apitest.BobToken, id); e.Node != n || e.State != domain.StateStarting {
			t.Fatalf("%s: %s on %s, claimed by %s", id, e.State, e.Node, n)
		}
	}
}

// A batch's answer stays within what API Gateway posts in one message:
// with templates so large that only some claims fit, the batch claims
// those and leaves the rest pending for the next claim.
func TestBatchClaimAnswerFitsOneMessage(t *testing.T) {
	se := newSocketEnv(t)
	ctx := context.Background()
	tpl, err := se.Store.GetTemplate(ctx, "acme", "sleeper")
	if err != nil {
		t.Fatal(err)
	}
	tpl.Quota.MaxLeases = 100
	tpl.Env = map[string]string{}
	for i := range 20 {
		tpl.Env[fmt.Sprintf("LARGE_%d", i)] = strings.Repeat("x", 1000)
	}
	if err := se.Store.PutTemplate(ctx, "acme", tpl); err != nil {
		t.Fatal(err)
	}
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 100)
	ids := se.leaseMany(t, 10)
	r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "1", Node: node, Environments: ids, Max: len(ids)})
	raw, _ := json.Marshal(r)
	if len(r.Claims) == 0 || len(r.Claims) == len(ids) || len(raw) > 96<<10 {
		t.Fatalf("%d of %d claimed in an answer of %d bytes", len(r.Claims), len(ids), len(raw))
	}
	pending := 0
	for _, id := range ids {
		if se.get(t, apitest.BobToken, id).State == domain.StatePending {
			pending++
		}
	}
	if pending != len(ids)-len(r.Claims) {
		t.Fatalf("%d pending after %d of %d were claimed", pending, len(r.Claims), len(ids))
	}
}

// Claims of one node racing each other (batches and single claims, at
// once) never take more than its capacity together, and no environment
// twice: each claim moves the node's claim fence, so of two that read the
// same free capacity the second reads again.
func TestClaimsOfOneNodeRacingStayWithinCapacity(t *testing.T) {
	for round := range 3 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			se := newSocketEnv(t)
			se.roomFor(t, 100)
			tok := se.credential(t, apitest.AliceToken, "local")
			const capacity, envs, racers = 5, 24, 8
			node := se.hello(t, "c1", tok, capacity)
			leased := se.leaseMany(t, envs)
			var wg sync.WaitGroup
			got := make([]nodes.Message, racers)
			for i := range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					m := nodes.Message{Type: nodes.MsgClaim, ID: fmt.Sprint(i), Node: node}
					if i%2 == 0 {
						// A batch of offered ones, each racer its own.
						m.Environments, m.Max = leased[i*3:i*3+3], nodes.MaxClaimBatch
					} else {
						m.Environment = leased[i*3]
					}
					got[i] = se.send(t, "c1", tok, m)
				}()
			}
			wg.Wait()
			owner := map[string]bool{}
			for i, r := range got {
				claims := r.Claims
				if r.Claimed != nil {
					claims = append(claims, *r.Claimed)
				}
				switch {
				case r.Type == nodes.MsgError && r.Error.Status != 409:
					t.Fatalf("racer %d: %+v", i, r.Error)
				case r.Type == nodes.MsgError:
				case r.Type != nodes.MsgClaimed:
					t.Fatalf("racer %d: %+v", i, r)
				}
				for _, c := range claims {
					if owner[c.Environment.ID] {
						t.Fatalf("%s claimed twice", c.Environment.ID)
					}
					owner[c.Environment.ID] = true
				}
			}
			if len(owner) == 0 || len(owner) > capacity {
				t.Fatalf("%d claimed by a node of capacity %d", len(owner), capacity)
			}
			onNode := 0
			for _, id := range leased {
				if e := se.get(t, apitest.BobToken, id); e.Node == node {
					onNode++
				}
			}
			if onNode != len(owner) {
				t.Fatalf("%d on the node, %d claims answered", onNode, len(owner))
			}
		})
	}
}

// A claim made with a node read before another claim of it committed is
// refused on the node's claim fence, whatever the environments' index
// shows yet; and a claim past the capacity held is refused before a call.
func TestClaimFence(t *testing.T) {
	ctx := context.Background()
	se := newSocketEnv(t)
	se.roomFor(t, 100)
	tok := se.credential(t, apitest.AliceToken, "local")
	id := se.hello(t, "c1", tok, 4)
	leased := se.leaseMany(t, 6)
	n, err := se.Store.GetNode(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	_, n, err = se.Store.NodeHolding(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	envs, err := se.Store.GetEnvironments(ctx, "acme", leased)
	if err != nil {
		t.Fatal(err)
	}
	now := se.Clock.Now()
	if claimed, _, err := se.Store.ClaimEnvironments(ctx, envs[:2], n, "", now); err != nil || len(claimed) != 2 {
		t.Fatalf("first claim: %d, %v", len(claimed), err)
	}
	// The same node as read before the first claim: refused, nothing moved.
	if _, _, err := se.Store.ClaimEnvironments(ctx, envs[2:5], n, "", now); !errors.Is(err, domain.ErrClaimRaced) {
		t.Fatalf("a claim with a stale node: %v, want ErrClaimRaced", err)
	}
	if _, _, err := se.Store.ClaimEnvironment(ctx, envs[2], n, "", now); !errors.Is(err, domain.ErrClaimRaced) {
		t.Fatalf("a single claim with a stale node: %v, want ErrClaimRaced", err)
	}
	n, err = se.Store.GetNode(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	runs, n, err := se.Store.NodeHolding(ctx, n)
	if err != nil || len(runs) != 2 || len(n.Claims.Held) != 2 {
		t.Fatalf("holding after the first claim: %d environments, held %v, %v", len(runs), n.Claims.Held, err)
	}
	if _, _, err := se.Store.ClaimEnvironments(ctx, envs[2:5], n, "", now); domain.ErrorCode(err) != domain.CodeConflict {
		t.Fatalf("three more on a node of 4 holding 2: %v, want a conflict", err)
	}
	if claimed, _, err := se.Store.ClaimEnvironments(ctx, envs[2:4], n, "", now); err != nil || len(claimed) != 2 {
		t.Fatalf("two more: %d, %v", len(claimed), err)
	}
	for i, e := range envs {
		cur, err := se.Store.GetEnvironment(ctx, "acme", e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 4; (cur.Node == id) != want {
			t.Fatalf("environment %d: on %q", i, cur.Node)
		}
	}
}

// Batch claims go on filling a node that holds more than a hundred: what it
// holds is read in batch reads of at most a hundred keys, the index's and
// the claim fence's together, each key once.
func TestBatchClaimsFillALargeNode(t *testing.T) {
	se := newSocketEnv(t)
	se.roomFor(t, 400)
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 400)
	ids := se.leaseMany(t, 140)
	got := 0
	for i := 0; got < len(ids); i++ {
		lo, hi := got, min(len(ids), got+nodes.MaxClaimBatch)
		r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: fmt.Sprint(i), Node: node, Environments: ids[lo:hi], Max: hi - lo})
		if r.Type != nodes.MsgClaimed || len(r.Claims) != hi-lo {
			t.Fatalf("claim %d, holding %d: %d claimed (%+v)", i, got, len(r.Claims), r.Error)
		}
		got += len(r.Claims)
	}
}

// A batch claim reads what the node holds only when the node may be near its
// capacity: far from it, the node's index and its claim fence count every
// environment it may hold, and the claim costs what a claim of an empty
// node costs, however many it holds. Near it, each is read (one
// BatchGetItem more), those that ended are dropped from the fence, and the
// node fills to exactly its capacity.
func TestBatchClaimReadsHoldingNearCapacity(t *testing.T) {
	se := newSocketEnv(t)
	se.roomFor(t, 100)
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 8)
	ids := se.leaseMany(t, 10)
	claim := func(i int, offered []string) nodes.Message {
		t.Helper()
		return se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: fmt.Sprint(i), Node: node, Environments: offered, Max: len(offered)})
	}
	far := map[string]int{"BatchGetItem": 2, "GetItem": 1, "Query": 1, "TransactWriteItems": 1}
	for i := 0; i < 4; i++ {
		se.calls.Reset()
		if r := claim(i, ids[i:i+1]); len(r.Claims) != 1 {
			t.Fatalf("claim %d: %+v", i, r)
		}
		if counts := se.calls.Counts(); fmt.Sprint(counts) != fmt.Sprint(far) {
			t.Fatalf("claim %d, holding %d of 8: %v, want %v", i, i, counts, far)
		}
	}
	// Two of the four end: the fence still names them, so the next claim
	// counts them, and fits (4 + 4 of 8) without reading them.
	for _, id := range ids[:2] {
		if r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgReport, ID: "r" + id, Node: node, Environment: id,
			Report: &nodes.Report{State: domain.StateStopped}}); r.Record == nil || r.Record.State != domain.StateStopped {
			t.Fatalf("report stopped: %+v", r)
		}
	}
	se.calls.Reset()
	if r := claim(4, ids[4:8]); len(r.Claims) != 4 {
		t.Fatalf("four more (two of four held ended): %+v", r)
	}
	if counts := se.calls.Counts(); fmt.Sprint(counts) != fmt.Sprint(far) {
		t.Fatalf("a claim that fits counting the ended ones: %v, want %v", counts, far)
	}
	// It may hold 8 of 8: the next claim reads each, finds 6, and two fit.
	se.calls.Reset()
	if r := claim(5, ids[8:10]); len(r.Claims) != 2 {
		t.Fatalf("the last two: %+v", r)
	}
	near := map[string]int{"BatchGetItem": 3, "GetItem": 1, "Query": 1, "TransactWriteItems": 1}
	if counts := se.calls.Counts(); fmt.Sprint(counts) != fmt.Sprint(near) {
		t.Fatalf("a claim that may reach the capacity: %v, want %v", counts, near)
	}
	if r := se.send(t, "c1", tok, nodes.Message{Type: nodes.MsgClaim, ID: "full", Node: node, Max: 4}); r.Type != nodes.MsgError || r.Error.Status != 409 {
		t.Fatalf("a claim of a full node: %+v", r)
	}
}
