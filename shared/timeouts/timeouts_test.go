package timeouts_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/timeouts"
	"github.com/envlease/envlease/shared/usage"
)

func newEnv(t testing.TB) *apitest.Env {
	t.Helper()
	return apitest.New(t, func(e *apitest.Env) [][]httpapi.Route {
		return [][]httpapi.Route{environments.Routes(environments.NewService(e.Store, e.Clock))}
	})
}

// envJSON is the environment as GET and DELETE of one environment return it.
type envJSON struct {
	ID         string     `json:"id"`
	State      string     `json:"state"`
	StopReason string     `json:"stopReason"`
	Stopped    *time.Time `json:"stopped"`
	IdleUntil  time.Time  `json:"idleUntil"`
	Expires    time.Time  `json:"expires"`
}

// leasedBody is the lease's answer: the environment next to the sandbox's configuration.
type leasedBody struct {
	Environment envJSON `json:"environment"`
}

func lease(t testing.TB, e *apitest.Env, token, template string) string {
	t.Helper()
	res := e.Do(http.MethodPost, "/v1/environments", token, map[string]any{"template": template})
	if res.Status != http.StatusCreated {
		t.Fatalf("lease %s: %d %s", template, res.Status, res.Body)
	}
	var b leasedBody
	res.JSON(t, &b)
	return b.Environment.ID
}

func get(t testing.TB, e *apitest.Env, token, id string) envJSON {
	t.Helper()
	res := e.Do(http.MethodGet, "/v1/environments/"+id, token, nil)
	if res.Status != http.StatusOK {
		t.Fatalf("get %s: %d %s", id, res.Status, res.Body)
	}
	var b envJSON
	res.JSON(t, &b)
	if b.ID != id {
		t.Fatalf("get %s answered %s", id, res.Body)
	}
	return b
}

func touch(t testing.TB, e *apitest.Env, id string) *apitest.Response {
	t.Helper()
	return e.Do(http.MethodPost, "/v1/environments/"+id+"/touch", apitest.BobToken, nil)
}

func sweep(t testing.TB, e *apitest.Env) timeouts.Summary {
	t.Helper()
	sum, err := timeouts.Run(context.Background(), e.Store, e.Clock, timeouts.Options{})
	if err != nil {
		t.Fatalf("sweep: %v (%+v)", err, sum)
	}
	return sum
}

func running(t testing.TB, e *apitest.Env, org, template string) int {
	t.Helper()
	qs, err := e.Store.ListQuotas(context.Background(), org)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Template == template {
			return q.Running
		}
	}
	t.Fatalf("no quota for %s/%s", org, template)
	return 0
}

// ledger returns org's recorded usage as "template day" -> seconds.
func ledger(t testing.TB, e *apitest.Env, org string) map[string]int64 {
	t.Helper()
	es, err := e.Store.ListUsage(context.Background(), org, "2000-01-01", "2100-01-01")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, x := range es {
		out[x.Template+" "+x.Day] = x.Seconds
	}
	return out
}

func expectStopped(t testing.TB, e *apitest.Env, id, reason string, at time.Time) {
	t.Helper()
	b := get(t, e, apitest.BobToken, id)
	if b.State != "stopped" || b.StopReason != reason || b.Stopped == nil || !b.Stopped.Equal(at) {
		t.Fatalf("environment %s: state %s reason %q stopped %v; want stopped, %q at %s", id, b.State, b.StopReason, b.Stopped, reason, at)
	}
}

// sleeper has idle 10m and hard 1h (apitest fixture).
func TestIdleTimeoutStopsAndReleasesQuotaAndRecordsUsage(t *testing.T) {
	e := newEnv(t)
	id := lease(t, e, apitest.BobToken, "sleeper")

	e.Clock.Advance(10*time.Minute - time.Second)
	// One query per partition of the due index, each finding nothing.
	if s := sweep(t, e); s.Found != 0 || s.Stopped != 0 || s.Pages != len(e.Store.EnvDuePartitions()) {
		t.Fatalf("a second before the idle deadline: %+v", s)
	}
	if st := get(t, e, apitest.BobToken, id).State; st != "pending" {
		t.Fatalf("state %s before the deadline", st)
	}

	e.Clock.Advance(time.Second)
	if s := sweep(t, e); s.Found != 1 || s.Stopped != 1 || s.Idle != 1 || s.Hard != 0 {
		t.Fatalf("at the idle deadline: %+v", s)
	}
	expectStopped(t, e, id, timeouts.ReasonIdle, e.Clock.Now())
	if n := running(t, e, "acme", "sleeper"); n != 0 {
		t.Fatalf("running = %d after the idle stop", n)
	}
	day := apitest.Start.Format(usage.DayLayout)
	if got := ledger(t, e, "acme"); len(got) != 1 || got["sleeper "+day] != 600 {
		t.Fatalf("ledger %v, want sleeper %s = 600", got, day)
	}
	// Nothing is due any more: the stopped environment left the index.
	if s := sweep(t, e); s.Found != 0 {
		t.Fatalf("second sweep: %+v", s)
	}
	if res := touch(t, e, id); res.Status != http.StatusGone {
		t.Fatalf("touch after the idle stop: %d %s", res.Status, res.Body)
	}
}

func TestTouchKeepsAnEnvironmentAlive(t *testing.T) {
	e := newEnv(t)
	id := lease(t, e, apitest.BobToken, "sleeper")
	// 50 minutes of touching every 8, with a sweep after each step: never
	// idle for 10 minutes, so never stopped.
	for range 6 {
		e.Clock.Advance(8 * time.Minute)
		if res := touch(t, e, id); res.Status != http.StatusOK {
			t.Fatalf("touch at %s: %d %s", e.Clock.Now(), res.Status, res.Body)
		}
		if s := sweep(t, e); s.Stopped != 0 {
			t.Fatalf("stopped although touched: %+v", s)
		}
	}
	if st := get(t, e, apitest.BobToken, id).State; st != "pending" {
		t.Fatalf("state %s after touching", st)
	}
	// Touching stops: 10 minutes later it is idle.
	last := e.Clock.Now()
	e.Clock.Advance(10 * time.Minute)
	if s := sweep(t, e); s.Idle != 1 {
		t.Fatalf("after touching stopped: %+v", s)
	}
	expectStopped(t, e, id, timeouts.ReasonIdle, last.Add(10*time.Minute))
}

func TestHardTimeoutInSpiteOfTouching(t *testing.T) {
	e := newEnv(t)
	id := lease(t, e, apitest.BobToken, "sleeper")
	created := e.Clock.Now()
	for e.Clock.Now().Before(created.Add(time.Hour - 5*time.Minute)) {
		e.Clock.Advance(5 * time.Minute)
		if res := touch(t, e, id); res.Status != http.StatusOK {
			t.Fatalf("touch at %s: %d %s", e.Clock.Now(), res.Status, res.Body)
		}
		if s := sweep(t, e); s.Stopped != 0 {
			t.Fatalf("stopped at %s although touched: %+v", e.Clock.Now(), s)
		}
	}
	// The last touch could only move idleUntil up to expires.
	b := get(t, e, apitest.BobToken, id)
	if !b.IdleUntil.Equal(b.Expires) || !b.Expires.Equal(created.Add(time.Hour)) {
		t.Fatalf("idleUntil %s, expires %s", b.IdleUntil, b.Expires)
	}
	e.Clock.Set(created.Add(time.Hour))
	if s := sweep(t, e); s.Stopped != 1 || s.Hard != 1 {
		t.Fatalf("at the hard deadline: %+v", s)
	}
	expectStopped(t, e, id, timeouts.ReasonHard, created.Add(time.Hour))
	if got := ledger(t, e, "acme"); got["sleeper "+created.Format(usage.DayLayout)] != 3600 {
		t.Fatalf("ledger %v", got)
	}
}

// An environment a node runs goes to stopping: the node tears it down. The
// quota and the ledger are settled at once all the same.
func TestTimeoutOfARunningEnvironmentEndsStopping(t *testing.T) {
	e := newEnv(t)
	id := lease(t, e, apitest.BobToken, "sleeper")
	ctx := context.Background()
	env, err := e.Store.GetEnvironment(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	// What a node's claim and report would write (the node side owns those
	// transitions): ready on node-1, version bumped.
	env.State, env.Node, env.Version = domain.StateReady, "node-1", env.Version+1
	if err := e.Store.PutEnvironments(ctx, []domain.Environment{env}); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(10 * time.Minute)
	if s := sweep(t, e); s.Idle != 1 {
		t.Fatalf("%+v", s)
	}
	b := get(t, e, apitest.BobToken, id)
	if b.State != "stopping" || b.StopReason != "idle" {
		t.Fatalf("state %s reason %s, want stopping idle", b.State, b.StopReason)
	}
	if n := running(t, e, "acme", "sleeper"); n != 0 {
		t.Fatalf("running = %d", n)
	}
	if s := sweep(t, e); s.Found != 0 {
		t.Fatalf("a stopping environment is still due: %+v", s)
	}
}

// Two sweeps at once and a DELETE racing them: each environment is stopped
// once, `running` ends at exactly 0, and the ledger holds each environment's
// seconds once.
func TestOverlappingSweepsAndADeleteReleaseTheQuotaOnce(t *testing.T) {
	e := newEnv(t)
	for round := range 5 {
		ids := []string{
			lease(t, e, apitest.BobToken, "sleeper"), lease(t, e, apitest.BobToken, "sleeper"), lease(t, e, apitest.BobToken, "sleeper"),
			lease(t, e, apitest.BobToken, "shell"), lease(t, e, apitest.BobToken, "shell"),
		}
		// Past sleeper's hard 1h and shell's idle 30m: all five are due.
		e.Clock.Advance(time.Hour)
		var wg sync.WaitGroup
		sums := make([]timeouts.Summary, 2)
		errs := make([]error, 2)
		var del *apitest.Response
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sums[i], errs[i] = timeouts.Run(context.Background(), e.Store, e.Clock, timeouts.Options{Workers: 2})
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			del = e.Do(http.MethodDelete, "/v1/environments/"+ids[round%len(ids)], apitest.BobToken, nil)
		}()
		wg.Wait()
		if errs[0] != nil || errs[1] != nil || del.Status != http.StatusOK {
			t.Fatalf("round %d: %v %v delete %d %s", round, errs[0], errs[1], del.Status, del.Body)
		}
		stoppedBySweeps := sums[0].Stopped + sums[1].Stopped
		var deleted envJSON
		del.JSON(t, &deleted)
		if deleted.ID != ids[round%len(ids)] {
			t.Fatalf("round %d: delete of %s answered %s", round, ids[round%len(ids)], del.Body)
		}
		byDelete := 0
		if deleted.StopReason == domain.StopDeleted {
			byDelete = 1
		}
		if stoppedBySweeps+byDelete != 5 {
			t.Fatalf("round %d: sweeps stopped %d (%+v, %+v), delete %d: want 5 stops in all", round, stoppedBySweeps, sums[0], sums[1], byDelete)
		}
		for _, id := range ids {
			if st := get(t, e, apitest.BobToken, id).State; st != "stopped" {
				t.Fatalf("round %d: %s is %s", round, id, st)
			}
		}
		if a, b := running(t, e, "acme", "sleeper"), running(t, e, "acme", "shell"); a != 0 || b != 0 {
			t.Fatalf("round %d: running sleeper %d shell %d, want 0 and 0", round, a, b)
		}
	}
	// Every environment lived exactly one hour: 5 rounds x 5 x 3600 s, on
	// the test's one day, split by template.
	var total int64
	for _, s := range ledger(t, e, "acme") {
		total += s
	}
	if total != 5*5*3600 {
		t.Fatalf("ledger total %d s, want %d: %v", total, 5*5*3600, ledger(t, e, "acme"))
	}
}

// An environment from 23:30 to 00:45 is 1800 s on the first day and 2700 s on
// the second.
func TestUsageSplitsAtMidnight(t *testing.T) {
	e := newEnv(t)
	e.Clock.Set(time.Date(2026, 3, 14, 23, 30, 0, 0, time.UTC))
	id := lease(t, e, apitest.BobToken, "shell") // idle 30m, hard 6h
	for range 3 {
		e.Clock.Advance(20 * time.Minute)
		if res := touch(t, e, id); res.Status != http.StatusOK {
			t.Fatalf("touch: %d %s", res.Status, res.Body)
		}
		sweep(t, e)
	}
	e.Clock.Advance(15 * time.Minute) // 00:45
	if res := e.Do(http.MethodDelete, "/v1/environments/"+id, apitest.BobToken, nil); res.Status != http.StatusOK {
		t.Fatalf("delete: %d %s", res.Status, res.Body)
	}
	got := ledger(t, e, "acme")
	if len(got) != 2 || got["shell 2026-03-14"] != 1800 || got["shell 2026-03-15"] != 2700 {
		t.Fatalf("ledger %v, want shell 2026-03-14 = 1800 and 2026-03-15 = 2700", got)
	}
}

// 250 due among others not due, pages of 5 in each partition of the due
// index: all stopped, each partition read with continuation, and the ones
// not due untouched.
func TestBoundedPagesWithContinuation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := e.Clock.Now()
	var envs []domain.Environment
	for i := range 300 {
		created := now.Add(-time.Hour)
		idleUntil := now.Add(-time.Duration(i+1) * time.Second) // due
		if i >= 250 {
			idleUntil = now.Add(time.Minute) // not due yet
		}
		envs = append(envs, domain.Environment{
			OrgID: "acme", ID: fmt.Sprintf("env_seed%04d", i), Name: "seed", Template: "sleeper",
			State: domain.StatePending, Pool: "local", CreatedBy: "user:bob", Created: created,
			Expires: created.Add(2 * time.Hour), IdleUntil: idleUntil,
			Idle: domain.Duration(10 * time.Minute), Hard: domain.Duration(2 * time.Hour), Version: 1,
		})
	}
	if err := e.Store.PutEnvironments(ctx, envs); err != nil {
		t.Fatal(err)
	}
	setRunning(t, e, "acme", "sleeper", 300)
	due := map[string]int{}
	for _, env := range envs[:250] {
		due[e.Store.EnvDuePartition(env.OrgID, env.ID)]++
	}
	// A partition of n due takes n/5 full pages and one more that ends it.
	pages := 0
	for _, part := range e.Store.EnvDuePartitions() {
		pages += due[part]/5 + 1
	}

	sum, err := timeouts.Run(ctx, e.Store, e.Clock, timeouts.Options{PageSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Found != 250 || sum.Stopped != 250 || sum.Idle != 250 || sum.Pages != pages || sum.Failed != 0 {
		t.Fatalf("summary %+v, want 250 found and stopped in %d pages", sum, pages)
	}
	if n := running(t, e, "acme", "sleeper"); n != 50 {
		t.Fatalf("running = %d, want the 50 not due", n)
	}
	// MaxPages bounds a run; the next run picks up the rest.
	e.Clock.Advance(2 * time.Minute)
	sum, err = timeouts.Run(ctx, e.Store, e.Clock, timeouts.Options{PageSize: 20, MaxPages: 2})
	if err != nil || sum.Pages != 2 || sum.Stopped == 0 || sum.Stopped >= 50 || !sum.More {
		t.Fatalf("bounded run: %+v %v", sum, err)
	}
	first := sum.Stopped
	if sum = sweep(t, e); sum.Stopped != 50-first || sum.More {
		t.Fatalf("the rest: %+v, want %d", sum, 50-first)
	}
	if n := running(t, e, "acme", "sleeper"); n != 0 {
		t.Fatalf("running = %d", n)
	}
}

// setRunning sets a quota's running count, for environments seeded without a lease.
func setRunning(t testing.TB, e *apitest.Env, org, template string, n int) {
	t.Helper()
	_, err := e.Store.DB().UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(e.Store.Table()),
		Key: map[string]types.AttributeValue{
			store.AttrPK: &types.AttributeValueMemberS{Value: "ORG#" + org},
			store.AttrSK: &types.AttributeValueMemberS{Value: "QUOTA#" + template},
		},
		UpdateExpression:          aws.String("SET running = :n"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: fmt.Sprint(n)}},
	})
	if err != nil {
		t.Fatal(err)
	}
}
