package nodes_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// runTicks gives a job loop n ticks and returns once it has run them all.
func runTicks(loop func(context.Context, <-chan time.Time), n int) {
	ticks := make(chan time.Time)
	done := make(chan struct{})
	go func() { defer close(done); loop(context.Background(), ticks) }()
	for i := 0; i < n; i++ {
		ticks <- time.Now()
	}
	close(ticks)
	<-done
}

const idleTicks = 20

// The re-offer loop told of the process's writes (SkipIdle) reads a shard
// only when an offer was written to it since it last read it, when what it
// read there falls due, or when it has not read every shard for maxIdle:
// over idle ticks it reads the shards once, where the loop without it
// reads every shard on every tick. A lost offer is still sent again when
// due, for one query a tick that has something to do.
func TestIdleReofferLoopSkipsItsWalks(t *testing.T) {
	se := newSocketEnv(t)
	se.offerer.SkipIdle(se.Store.OfferWrites, time.Minute)
	tok := se.credential(t, apitest.AliceToken, "local")
	se.hello(t, "c1", tok, 4)
	queries := func() int { return se.calls.Counts()["Query"] }

	// Without SkipIdle (the scheduled function): every tick reads every shard.
	plain := nodes.NewOfferer(se.Store.WithClient(dynamodb.New(se.Store.DB().Options(), se.calls.Option)), se.poster, se.Clock, se.Log, 3*time.Second)
	se.calls.Reset()
	runTicks(plain.ReofferOnTicks, idleTicks)
	if got := queries(); got != idleTicks*domain.OfferShards {
		t.Fatalf("loop without SkipIdle: %d queries over %d ticks, want %d", got, idleTicks, idleTicks*domain.OfferShards)
	}

	steps := []struct {
		name    string
		before  func()
		queries int
		offered bool
	}{
		{name: "idle: the first tick reads every shard, the others none", queries: domain.OfferShards},
		{name: "still idle", queries: 0},
		{name: "maxIdle on: every shard read all the same", before: func() { se.Clock.Advance(time.Minute) }, queries: domain.OfferShards},
		{name: "a lost offer: its shard read, the offer not yet due", before: func() {
			se.poster.drop = true
			se.lease(t, apitest.BobToken, map[string]any{"template": "shell"})
			se.poster.drop = false
		}, queries: 1},
		// The read that re-offers moves the offer (a write), so the next
		// tick reads its shard once more and finds it not due.
		{name: "due: re-offered", before: func() { se.Clock.Advance(3 * time.Second) }, queries: 2, offered: true},
		{name: "before the backoff: nothing read", before: func() { se.Clock.Advance(5 * time.Second) }, queries: 0},
		{name: "after the backoff: re-offered", before: func() { se.Clock.Advance(time.Second) }, queries: 2, offered: true},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		se.poster.taken()
		se.calls.Reset()
		runTicks(se.offerer.ReofferOnTicks, idleTicks)
		if got := queries(); got != st.queries {
			t.Fatalf("%s: %d queries over %d ticks (%v), want %d", st.name, got, idleTicks, se.calls.Counts(), st.queries)
		}
		if got := offered(se.poster.taken()); (len(got["c1"]) == 1) != st.offered {
			t.Fatalf("%s: offers posted %v", st.name, got)
		}
	}
}

// The stop loop skips its idle shards as the re-offer loop does; a stop
// message that was lost is still sent again once its notice is due.
func TestIdleStopLoopSkipsItsWalks(t *testing.T) {
	se := newSocketEnv(t)
	se.stopper.SkipIdle(se.Store.StopWrites, time.Minute)
	tok := se.credential(t, apitest.AliceToken, "local")
	node := se.hello(t, "c1", tok, 4)
	id := se.runningOn(t, "c1", tok, node)
	queries := func() int { return se.calls.Counts()["Query"] }

	steps := []struct {
		name    string
		before  func()
		queries int
		resent  bool
	}{
		{name: "idle: the first tick reads every shard, the others none", queries: domain.StopShards},
		{name: "still idle", queries: 0},
		{name: "a lost stop: its shard read, the notice not yet due", before: func() {
			se.poster.drop = true
			se.del(t, id)
			se.poster.drop = false
		}, queries: 1},
		{name: "not due yet: nothing read", before: func() { se.Clock.Advance(29 * time.Second) }, queries: 0},
		{name: "due: sent again", before: func() { se.Clock.Advance(time.Second) }, queries: 2, resent: true},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		se.poster.taken()
		se.calls.Reset()
		runTicks(se.stopper.ResendOnTicks, idleTicks)
		if got := queries(); got != st.queries {
			t.Fatalf("%s: %d queries over %d ticks (%v), want %d", st.name, got, idleTicks, se.calls.Counts(), st.queries)
		}
		if got := stopsOf(se.poster.taken()); slices.Equal(got["c1"], []string{id}) != st.resent {
			t.Fatalf("%s: stops posted %v", st.name, got)
		}
	}
}
