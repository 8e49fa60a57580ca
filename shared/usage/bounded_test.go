package usage_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/auth"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/usage"
)

// MaxMonthCalls is what reading a month of usage grouped by a label with
// 1,000 values (30,000 ledger items, every value every day) may cost in
// DynamoDB calls: authentication (1), the settings (1), the ledger's range
// query in pages of 1 MB (about 150 bytes an item: 5 pages) and the live
// environments (1 query). The bound leaves room for the page size to vary
// between DynamoDB implementations; it does not grow with environments.
const MaxMonthCalls = 10

func TestMonthOfThousandLabelValuesIsBoundedReads(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 30,000 ledger items")
	}
	e := newEnv(t)
	ctx := context.Background()
	if err := e.Store.PutUsageSettings(ctx, "acme", usage.Settings{Groupings: []string{"label:team"}}, 0); err != nil {
		t.Fatal(err)
	}
	var seed []usage.GroupEntry
	for d := 1; d <= 30; d++ {
		day := time.Date(2026, 3, d, 0, 0, 0, 0, time.UTC).Format(usage.DayLayout)
		for v := range 1000 {
			seed = append(seed, usage.GroupEntry{Dim: "label:team", Value: fmt.Sprintf("team-%04d", v), Template: "sleeper", Day: day, Seconds: 60})
		}
	}
	if err := e.Store.PutUsageBy(ctx, "acme", seed); err != nil {
		t.Fatal(err)
	}
	e.Clock.Set(time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC))
	counter := store.NewCallCounter()
	counted := e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), counter.Option))
	e.Handler = httpapi.New(httpapi.Config{Logger: e.Log, Auth: auth.New(counted, e.Clock, e.Log)}, usage.Routes(usage.NewService(counted, e.Clock)))
	e.Do(http.MethodGet, "/v1/usage/settings", apitest.AliceToken, nil) // the first use of a token records lastUsed
	counter.Reset()
	r := report(t, e, apitest.AliceToken, "?by=label:team&since=2026-03-01")
	if len(r.Usage) != 30000 {
		t.Fatalf("%d entries, want 30000", len(r.Usage))
	}
	got := counter.Counts()
	t.Logf("a month of 1,000 label values: %d DynamoDB calls %v", counter.Total(), got)
	if counter.Total() > MaxMonthCalls || got["GetItem"] != 1 {
		t.Fatalf("a month of 1,000 label values cost %d calls %v; the bound is %d", counter.Total(), got, MaxMonthCalls)
	}
}
