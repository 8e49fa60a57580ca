package usage_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/store"
)

// A stop is one transaction whatever the groupings; each grouping the
// environment was leased with adds one ledger item per UTC day it ran: 2
// write units (a transactional update of an item under 1 KB). The test logs
// the figure the docs give (go test ./shared/usage -run StopWriteCost -v).
func TestStopWriteCostPerGrouping(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	counter := store.NewCallCounter()
	counted := e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), counter.Option))
	all := []string{"project", "user", "label:a", "label:b", "label:c", "label:d", "label:e", "label:f"}
	base := -1
	for _, n := range []int{0, 1, 3, 8} {
		id := lease(t, e, apitest.BobToken, "sleeper")
		env, err := counted.GetEnvironment(ctx, "acme", id)
		if err != nil {
			t.Fatal(err)
		}
		env.UsageBy = all[:n] // as a lease with n groupings enabled records them
		e.Clock.Advance(time.Minute)
		counter.ResetWrites()
		if _, stopped, err := counted.StopEnvironment(ctx, env, domain.StateStopped, domain.StopDeleted, e.Clock.Now()); err != nil || !stopped {
			t.Fatalf("stop: %v %v", stopped, err)
		}
		calls, units := counter.Counts(), counter.WriteUnits()
		if base < 0 {
			base = units
		}
		t.Logf("stop of a one-day environment with %d groupings: %v, %d write units (+%d)", n, calls, units, units-base)
		if counter.Total() != 1 || calls["TransactWriteItems"] != 1 || units-base != 2*n {
			t.Fatalf("%d groupings: %v, %d units; want one transaction and %d more units", n, calls, units, 2*n)
		}
	}
}
