package environments_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/store"
)

// Benchmarks report DynamoDB round trips per request (ddb-calls/op, from
// store.CallCounter) and, for listings, the items the queries read
// (items-read/op, DynamoDB's ScannedCount, which is what read capacity is
// paid for). ns/op is of the local stack's minidyn on loopback, not of
// DynamoDB; like DynamoDB, it reads only a query's partition range (see
// devstack's minidynFront).

// benchTemplate is leased by the benchmarks with a quota that never binds.
func benchTemplate(b *testing.B, e *apitest.Env) {
	b.Helper()
	err := e.Store.PutTemplate(context.Background(), "acme", domain.Template{
		Name: "bench", Command: []string{"true"}, Runtime: "process", Pools: []string{"local"},
		Timeouts: domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(2 * time.Hour)},
		Exports:  map[string]domain.Export{"web": {Port: 8080}}, Quota: domain.Quota{MaxLeases: 1 << 30},
	})
	if err != nil {
		b.Fatal(err)
	}
}

// scannedCounter adds up the items Query responses read: ScannedCount where
// the endpoint reports it (DynamoDB does; minidyn leaves it 0), else Count,
// which equals it for queries without a filter.
type scannedCounter struct{ n atomic.Int64 }

func (c *scannedCounter) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("benchScanned",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				if q, ok := out.Result.(*dynamodb.QueryOutput); ok {
					c.n.Add(int64(max(q.ScannedCount, q.Count)))
				}
				return out, md, err
			}), middleware.After)
	})
}

func BenchmarkLease(b *testing.B) {
	e, counter := newCountedEnv(b)
	benchTemplate(b, e)
	body := `{"template":"bench","labels":{"team":"web"}}`
	// Warm up: the token's lastUsed write and the template read happen once.
	if r := e.Do(http.MethodPost, "/v1/environments", apitest.AliceToken, body); r.Status != 201 {
		b.Fatalf("%d %s", r.Status, r.Body)
	}
	counter.Reset()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := e.Do(http.MethodPost, "/v1/environments", apitest.AliceToken, body); r.Status != 201 {
			b.Fatalf("%d %s", r.Status, r.Body)
		}
	}
	b.StopTimer()
	c := counter.Counts()
	b.ReportMetric(float64(counter.Total())/float64(b.N), "ddb-calls/op")
	b.ReportMetric(float64(c["BatchGetItem"])/float64(b.N), "auth-reads/op")
	b.ReportMetric(float64(c["TransactWriteItems"])/float64(b.N), "transactions/op")
}

// BenchmarkListLive lists the 10 live environments of an organization beside
// 10 and beside 10,000 stopped ones: the live partition of the sparse GSI1
// holds only live environments, so calls and items read stay the same.
func BenchmarkListLive(b *testing.B) {
	for _, stopped := range []int{10, 10000} {
		b.Run(fmt.Sprintf("live=10/stopped=%d", stopped), func(b *testing.B) {
			e, counter := newCountedEnv(b)
			var scanned scannedCounter
			counted := e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), counter.Option, scanned.option))
			e.Handler = countedHandler(e, counted)
			benchTemplate(b, e)
			for i := 0; i < 10; i++ {
				if r := e.Do(http.MethodPost, "/v1/environments", apitest.AliceToken, `{"template":"bench"}`); r.Status != 201 {
					b.Fatalf("%d %s", r.Status, r.Body)
				}
			}
			seedStopped(b, e.Store, stopped)
			var page struct {
				Environments []map[string]any `json:"environments"`
			}
			e.Do(http.MethodGet, "/v1/environments", apitest.AliceToken, nil).JSON(b, &page)
			if len(page.Environments) != 10 {
				b.Fatalf("%d live listed", len(page.Environments))
			}
			counter.Reset()
			scanned.n.Store(0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if r := e.Do(http.MethodGet, "/v1/environments", apitest.AliceToken, nil); r.Status != 200 {
					b.Fatalf("%d %s", r.Status, r.Body)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(counter.Total())/float64(b.N), "ddb-calls/op")
			b.ReportMetric(float64(counter.Counts()["Query"])/float64(b.N), "queries/op")
			b.ReportMetric(float64(scanned.n.Load())/float64(b.N), "items-read/op")
		})
	}
}

// seedStopped writes n stopped environments of acme straight through the
// store, 25 per BatchWriteItem: history, not leases.
func seedStopped(b *testing.B, st *store.Store, n int) {
	b.Helper()
	base := apitest.Start.Add(-48 * time.Hour)
	envs := make([]domain.Environment, 0, 500)
	for i := 0; i < n; i++ {
		created := base.Add(time.Duration(i) * time.Second)
		stopped := created.Add(time.Minute)
		envs = append(envs, domain.Environment{
			OrgID: "acme", ID: domain.SortableID("env_", created), Name: "old", Template: "bench",
			State: domain.StateStopped, Pool: "local", CreatedBy: "alice", Created: created, Stopped: &stopped,
			Expires: created.Add(2 * time.Hour), IdleUntil: created.Add(time.Hour),
			Idle: domain.Duration(time.Hour), Hard: domain.Duration(2 * time.Hour), StopReason: domain.StopDeleted, Version: 2,
		})
		if len(envs) == cap(envs) || i == n-1 {
			if err := st.PutEnvironments(context.Background(), envs); err != nil {
				b.Fatal(err)
			}
			envs = envs[:0]
		}
	}
}
