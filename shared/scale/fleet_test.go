package scale_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/fixture"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/store"
	"github.com/envlease/envlease/shared/timeouts"
)

// size is one simulation's shape. Every tick is 10 s of simulated time:
// every live environment is touched once, Churn of them are deleted and as
// many leased, every node heartbeats; every sixth tick (a minute) the timeout
// job and the lost-node sweep run.
type size struct {
	Orgs, Envs, Nodes, Ticks int
	// Churn is the share of live environments replaced per tick: the
	// target's 20,000 leases a minute among 200,000 live is 10 % a minute.
	Churn float64
	// Idle is the template's idle timeout: short, so that the due-index
	// entries the touches leave behind come due within the run and the
	// job's moving of them is counted.
	Idle time.Duration
}

// report is what a simulation measured.
type report struct {
	Size           size           `json:"size"`
	Touches        int            `json:"touches"`
	Leases         int            `json:"leases"`
	Stops          int            `json:"stops"`
	Heartbeats     int            `json:"heartbeats"`
	JobRuns        int            `json:"jobRuns"`
	Reindexed      int            `json:"reindexed"`
	Calls          map[string]int `json:"calls"` // per actor
	Units          map[string]int `json:"units"` // write units per actor
	TouchUnits     float64        `json:"touchUnits"`
	TouchUnitsJob  float64        `json:"touchUnitsWithJob"`
	TotalUnits     int            `json:"totalUnits"`
	TotalWrites    int            `json:"totalWrites"`
	Partitions     int            `json:"partitions"`
	MaxUnitsShare  float64        `json:"maxUnitsShare"`
	MaxWritesShare float64        `json:"maxWritesShare"`
	Top            []store.PartitionWrites
	// TopByWhere is the most written partition key of the table and of
	// each index, with its share of all write units.
	TopByWhere  map[string]share `json:"topByWhere"`
	WallSeconds float64          `json:"wallSeconds"`
	// PhaseSeconds is the wall time of each kind of work, summed over ticks.
	PhaseSeconds    map[string]float64 `json:"phaseSeconds"`
	SimulatedMinute float64            `json:"simulatedMinutes"`
}

type share struct {
	Key   string  `json:"key"`
	Units int     `json:"units"`
	Share float64 `json:"share"`
}

// actor is one kind of caller with its own counted client.
type actor struct {
	name  string
	calls *store.CallCounter
	st    *store.Store
}

func newActor(e *apitest.Env, name string) *actor {
	c := store.NewCallCounter()
	return &actor{name: name, calls: c, st: e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), c.Option))}
}

func fleetFixture(t testing.TB, orgs int, idle time.Duration) fixture.File {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"orgs":[`)
	for i := range orgs {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":"org-%03d","name":"Org %d","pools":["local"],"users":[{"id":"dev","role":"member"}],
			"templates":[{"name":"sleeper","description":"a sleeper","command":["sleep","3600"],"runtime":"process",
			"pools":["local"],"timeouts":{"idle":%q,"hard":"6h"},"exports":{},"shares":[],"quota":{"maxLeases":100000}}]}`,
			i, i, idle.String())
	}
	b.WriteString(`]}`)
	f, err := fixture.Parse([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

type liveEnv struct{ org, id string }

func simulate(t testing.TB, sz size) report {
	ctx := context.Background()
	e := apitest.New(t, nil)
	if err := fixture.Apply(ctx, e.Store, fleetFixture(t, sz.Orgs, sz.Idle), fixture.Options{Now: e.Clock.Now()}); err != nil {
		t.Fatal(err)
	}
	toucher, churner, noder, jobber := newActor(e, "touch"), newActor(e, "churn"), newActor(e, "nodes"), newActor(e, "jobs")
	actors := []*actor{toucher, churner, noder, jobber}
	touchSvc := environments.NewService(toucher.st, e.Clock)
	churnSvc := environments.NewService(churner.st, e.Clock)
	nodeSvc := nodes.NewService(noder.st, nil, e.Clock, nodes.Options{})
	sweepSvc := nodes.NewService(jobber.st, nil, e.Clock, nodes.Options{})
	person := func(org string) domain.Principal {
		return domain.Principal{OrgID: org, UserID: "dev", Role: domain.RoleMember, Credential: domain.CredentialCLI}
	}
	org := func(i int) string { return fmt.Sprintf("org-%03d", i%sz.Orgs) }

	lease := func(o string) liveEnv {
		res, err := churnSvc.Lease(ctx, person(o), environments.LeaseRequest{Template: "sleeper"}, "")
		if err != nil {
			t.Fatalf("lease: %v", err)
		}
		var l environments.Leased
		if err := json.Unmarshal(res.Body, &l); err != nil {
			t.Fatalf("lease body: %v", err)
		}
		return liveEnv{o, l.Environment.ID}
	}
	// The fleet: environments spread evenly over the organizations, idle
	// nodes over them too.
	live := make([]liveEnv, sz.Envs)
	parallel(sz.Envs, 8, func(i int) { live[i] = lease(org(i)) })
	type node struct {
		p  domain.Principal
		id string
	}
	fleet := make([]node, sz.Nodes)
	for i := range fleet {
		p := domain.Principal{OrgID: org(i), Credential: domain.CredentialNode, Pool: "local", KeyID: "key_" + strconv.Itoa(i)}
		r, err := nodeSvc.Register(ctx, p, nodes.RegisterRequest{Name: "idle", Address: "10.0.0.1", Capacity: 10})
		if err != nil {
			t.Fatalf("register: %v", err)
		}
		fleet[i] = node{p, r.Node.ID}
	}
	for _, a := range actors {
		a.calls.ResetWrites() // steady state only; the items seen stay known
	}

	var rep report
	rep.Size = sz
	rnd := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	var mu sync.Mutex
	rep.PhaseSeconds = map[string]float64{}
	phase, lap := "", time.Now()
	mark := func(next string) {
		if phase != "" {
			rep.PhaseSeconds[phase] += time.Since(lap).Seconds()
		}
		phase, lap = next, time.Now()
	}
	for tick := 1; tick <= sz.Ticks; tick++ {
		e.Clock.Advance(10 * time.Second)
		mark("touch")
		parallel(len(live), 8, func(i int) {
			if _, err := touchSvc.Touch(ctx, person(live[i].org), live[i].id); err != nil {
				t.Errorf("touch %s: %v", live[i].id, err)
			}
		})
		rep.Touches += len(live)
		mark("churn")
		churn := int(float64(len(live)) * sz.Churn)
		picked := rnd.Perm(len(live))[:churn]
		parallel(churn, 8, func(k int) {
			i := picked[k]
			if _, err := churnSvc.Delete(ctx, person(live[i].org), live[i].id); err != nil {
				t.Errorf("delete: %v", err)
			}
			n := lease(live[i].org)
			mu.Lock()
			live[i] = n
			mu.Unlock()
		})
		rep.Stops += churn
		rep.Leases += churn
		mark("heartbeat")
		parallel(len(fleet), 8, func(i int) {
			if _, err := nodeSvc.Heartbeat(ctx, fleet[i].p, fleet[i].id, nil); err != nil {
				t.Errorf("heartbeat: %v", err)
			}
		})
		rep.Heartbeats += len(fleet)
		mark("")
		if tick%6 == 0 {
			mark("jobs")
			sum, err := timeouts.Run(ctx, jobber.st, e.Clock, timeouts.Options{})
			if err != nil {
				t.Fatalf("timeouts: %v", err)
			}
			if sum.Stopped != 0 {
				t.Errorf("the timeout job stopped %d touched environments", sum.Stopped)
			}
			rep.Reindexed += sum.Reindexed
			if res, err := sweepSvc.SweepLostNodes(ctx, e.Clock.Now()); err != nil || res.Nodes != 0 {
				t.Fatalf("lost-node sweep: %+v %v", res, err)
			}
			rep.JobRuns++
			mark("")
		}
	}
	rep.WallSeconds = time.Since(start).Seconds()
	rep.SimulatedMinute = float64(sz.Ticks) / 6

	rep.Calls, rep.Units = map[string]int{}, map[string]int{}
	byKey := map[string]*store.PartitionWrites{}
	for _, a := range actors {
		rep.Calls[a.name] = a.calls.Total()
		rep.Units[a.name] = a.calls.WriteUnits()
		rep.TotalUnits += a.calls.WriteUnits()
		for _, p := range a.calls.Partitions() {
			k := p.Where + " " + p.Key
			if byKey[k] == nil {
				byKey[k] = &store.PartitionWrites{Where: p.Where, Key: p.Key}
			}
			byKey[k].Writes += p.Writes
			byKey[k].Units += p.Units
			rep.TotalWrites += p.Writes
		}
	}
	var all []store.PartitionWrites
	for _, p := range byKey {
		all = append(all, *p)
		rep.MaxUnitsShare = max(rep.MaxUnitsShare, float64(p.Units)/float64(rep.TotalUnits))
		rep.MaxWritesShare = max(rep.MaxWritesShare, float64(p.Writes)/float64(rep.TotalWrites))
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Units > all[j].Units })
	rep.TopByWhere = map[string]share{}
	for _, p := range all {
		if _, ok := rep.TopByWhere[p.Where]; !ok {
			rep.TopByWhere[p.Where] = share{p.Key, p.Units, float64(p.Units) / float64(rep.TotalUnits)}
		}
	}
	rep.Partitions = len(all)
	rep.Top = all[:min(5, len(all))]
	rep.TouchUnits = float64(rep.Units["touch"]) / float64(rep.Touches)
	rep.TouchUnitsJob = float64(rep.Units["touch"]+rep.Units["jobs"]) / float64(rep.Touches)
	return rep
}

// parallel runs f(0..n-1) on workers goroutines.
func parallel(n, workers int, f func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// check holds a simulation to the goals: no partition key takes more than
// 5 % of the write units or of the writes, and a touch costs at most 2 write
// units, with the job's moving of the index entries it left counted in.
func check(t testing.TB, r report) {
	t.Helper()
	// One line: a benchmark's log keeps only its first lines.
	b, _ := json.Marshal(r)
	t.Logf("fleet simulation: %s", b)
	if r.MaxUnitsShare > 0.05 || r.MaxWritesShare > 0.05 {
		t.Errorf("a partition key took %.1f %% of the write units, %.1f %% of the writes (limit 5 %%): %+v",
			100*r.MaxUnitsShare, 100*r.MaxWritesShare, r.Top)
	}
	if r.TouchUnitsJob > 2 {
		t.Errorf("%.2f write units per touch with the job's reindexing (goal 2)", r.TouchUnitsJob)
	}
	if r.Reindexed == 0 {
		t.Errorf("the timeout job moved no due-index entry: the run is too short for the idle timeout")
	}
}

// A small fleet, run by every `go test`: the same checks as the benchmark.
func TestFleetSmoke(t *testing.T) {
	check(t, simulate(t, size{Orgs: 30, Envs: 150, Nodes: 6, Ticks: 7, Churn: 1.0 / 60, Idle: time.Minute}))
}

// BenchmarkFleet is the simulation at the size docs/scale.md records: 10,000
// live environments of 100 organizations touched every 10 s, 1/60 of them
// replaced every 10 s (leases and stops), 100 idle nodes heartbeating, the
// jobs every minute, for 2 simulated minutes. ENVLEASE_FLEET_ENVS, _ORGS,
// _NODES and _TICKS change the size. One iteration is the whole simulation.
//
//	ENVLEASE_TEST_DYNAMO=minidyn go test ./shared/scale -run '^$' -bench Fleet -benchtime 1x
func BenchmarkFleet(b *testing.B) {
	sz := size{Orgs: envInt("ENVLEASE_FLEET_ORGS", 100), Envs: envInt("ENVLEASE_FLEET_ENVS", 10000),
		Nodes: envInt("ENVLEASE_FLEET_NODES", 100), Ticks: envInt("ENVLEASE_FLEET_TICKS", 12), Churn: 1.0 / 60, Idle: time.Minute}
	for range b.N {
		r := simulate(b, sz)
		check(b, r)
		b.ReportMetric(r.TouchUnits, "WU/touch")
		b.ReportMetric(r.TouchUnitsJob, "WU/touch+job")
		b.ReportMetric(100*r.MaxUnitsShare, "max%units")
		b.ReportMetric(100*r.MaxWritesShare, "max%writes")
		b.ReportMetric(float64(r.Touches)/r.WallSeconds, "touches/s")
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
