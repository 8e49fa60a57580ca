package timeouts_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/timeouts"
)

// seedLive writes n live sleeper environments of acme straight through the
// store; the first due of them are past their idle deadline at now, the rest
// are due in an hour. The quota's running count is raised to match.
func seedLive(t testing.TB, e *apitest.Env, tag string, n, due int, now time.Time) {
	t.Helper()
	envs := make([]domain.Environment, 0, n)
	for i := range n {
		created := now.Add(-30 * time.Minute)
		idleUntil := now.Add(time.Hour)
		if i < due {
			idleUntil = now.Add(-time.Duration(i+1) * time.Millisecond)
		}
		envs = append(envs, domain.Environment{
			OrgID: "acme", ID: fmt.Sprintf("env_%s%06d", tag, i), Name: "seed", Template: "sleeper",
			State: domain.StatePending, Pool: "local", CreatedBy: "user:bob", Created: created,
			Expires: created.Add(6 * time.Hour), IdleUntil: idleUntil,
			Idle: domain.Duration(10 * time.Minute), Hard: domain.Duration(6 * time.Hour), Version: 1,
		})
	}
	if err := e.Store.PutEnvironments(context.Background(), envs); err != nil {
		t.Fatal(err)
	}
}

func counted(e *apitest.Env) (*store.Store, *store.CallCounter) {
	c := store.NewCallCounter()
	return e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), c.Option)), c
}

// One sweep costs the same DynamoDB calls with 100 due among 10,000 live as
// among 100: the index queries read what is due and nothing else.
func TestSweepCostGrowsWithWhatIsDueNotWithWhatIsLive(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 10,000 environments")
	}
	var costs []map[string]int
	for _, live := range []int{100, 10000} {
		e := apitest.New(t, nil)
		seedLive(t, e, "c", live, 100, e.Clock.Now())
		setRunning(t, e, "acme", "sleeper", live)
		st, calls := counted(e)
		sum, err := timeouts.Run(context.Background(), st, e.Clock, timeouts.Options{})
		if err != nil {
			t.Fatal(err)
		}
		// One query per partition of the due index (none holds a full page
		// of 100), one BatchGetItem per partition that has any, one stop
		// transaction per environment.
		parts := len(e.Store.EnvDuePartitions())
		got := calls.Counts()
		if sum.Stopped != 100 || sum.Pages != parts || got["Query"] != parts || got["TransactWriteItems"] != 100 ||
			got["BatchGetItem"] < 1 || got["BatchGetItem"] > parts || len(got) != 3 {
			t.Fatalf("live %d: summary %+v, calls %v", live, sum, got)
		}
		costs = append(costs, got)
		if n := running(t, e, "acme", "sleeper"); n != live-100 {
			t.Fatalf("live %d: running %d", live, n)
		}
	}
	if fmt.Sprint(costs[0]) != fmt.Sprint(costs[1]) {
		t.Fatalf("calls among 100 live %v, among 10,000 live %v", costs[0], costs[1])
	}
}

// BenchmarkSweep is one timeout run that stops 100 due environments, among
// 100 or 10,000 live ones. Each iteration seeds a fresh 100 due (untimed).
func BenchmarkSweep(b *testing.B) {
	for _, live := range []int{100, 10000} {
		b.Run(fmt.Sprintf("due=100/live=%d", live), func(b *testing.B) {
			e := apitest.New(b, nil)
			now := e.Clock.Now()
			seedLive(b, e, "base", live-100, 0, now) // never due during the benchmark
			setRunning(b, e, "acme", "sleeper", 1<<30)
			st, calls := counted(e)
			var totalCalls, found int
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				seedLive(b, e, fmt.Sprintf("due%d_", i), 100, 100, now)
				calls.Reset()
				b.StartTimer()
				sum, err := timeouts.Run(context.Background(), st, e.Clock, timeouts.Options{})
				if err != nil || sum.Stopped != 100 {
					b.Fatalf("%+v %v", sum, err)
				}
				totalCalls += calls.Total()
				found += sum.Found
			}
			b.ReportMetric(float64(totalCalls)/float64(b.N), "calls/sweep")
			b.ReportMetric(float64(found)/float64(b.N), "items-read/sweep")
		})
	}
}

// BenchmarkRunStopsAllDue is one timeout-job run that stops 10,000 due
// environments (ENVLEASE_BENCH_DUE changes the count), seeded untimed before
// each run, and reports the DynamoDB calls per stop. minidyn copies its whole
// table in every transaction, so the figure worth recording is DynamoDB
// Local's:
//
//	ENVLEASE_TEST_DYNAMO=dynamodb-local go test ./shared/timeouts -run '^$' -bench RunStopsAllDue -benchtime 1x
func BenchmarkRunStopsAllDue(b *testing.B) {
	due := 10000
	if v, err := strconv.Atoi(os.Getenv("ENVLEASE_BENCH_DUE")); err == nil && v > 0 {
		due = v
	}
	e := apitest.New(b, nil)
	setRunning(b, e, "acme", "sleeper", 1<<30)
	st, calls := counted(e)
	var stops, total int
	var elapsed time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		seedLive(b, e, fmt.Sprintf("all%d_", i), due, due, e.Clock.Now())
		calls.Reset()
		b.StartTimer()
		start := time.Now()
		sum, err := timeouts.Run(context.Background(), st, e.Clock, timeouts.Options{})
		elapsed += time.Since(start)
		if err != nil || sum.Stopped != due || sum.More {
			b.Fatalf("%+v %v", sum, err)
		}
		stops += sum.Stopped
		total += calls.Total()
		b.Logf("run: %+v, calls %v", sum, calls.Counts())
	}
	b.ReportMetric(float64(total)/float64(stops), "calls/stop")
	b.ReportMetric(float64(stops)/elapsed.Seconds(), "stops/s")
}
