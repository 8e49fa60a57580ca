package environments_test

import (
	"flag"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
)

// historyRounds is how many rounds of each kind BenchmarkLeaseAfterHistory
// measures on each table: a burst's median moves by a fifth from one burst
// to the next on a 2-core machine, and the ratio of two such medians more.
const historyRounds = 10

// leaseHistory is how many leases BenchmarkLeaseAfterHistory makes and
// deletes between its two measurements.
var leaseHistory = flag.Int("lease-history", 10000, "leases made and deleted between BenchmarkLeaseAfterHistory's fresh and later measurements")

// BenchmarkLeaseAfterHistory measures POST /v1/environments through the
// HTTP stack on two tables side by side: a fresh one, and one on which
// -lease-history leases were made and deleted through the same API first
// (each leaves its stopped environment, events and usage behind, as on a
// dev server used all day). Each is measured one at a time (historyRounds
// rounds of 20 leases in a row) and 100 at once (historyRounds bursts of 100
// concurrent leases), the two tables taking turns round by round so that a
// busy machine slows both alike. It reports the median and p99 of each, the process's CPU time per
// lease, and the ratio of the later medians to the fresh ones, which must
// stay near 1: DynamoDB's cost per lease does not depend on the table's
// size, and the local stack's should not either. It does its work once:
// run it with -benchtime 1x.
func BenchmarkLeaseAfterHistory(b *testing.B) {
	fresh, later := newLeaseBench(b), newLeaseBench(b)

	// The history: -lease-history leases, each deleted, by 8 clients.
	start := time.Now()
	work := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range work {
				later.del(later.lease())
			}
		})
	}
	for range *leaseHistory {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	historyRate := float64(*leaseHistory) / time.Since(start).Seconds()
	b.ResetTimer()

	// An even number of rounds, so that each table goes first as often as
	// second (the second runs just after the first deleted what it leased).
	for round := range historyRounds {
		for _, lb := range turns(round, fresh, later) {
			lb.oneAtATime(20)
		}
	}
	for round := range historyRounds {
		for _, lb := range turns(round, fresh, later) {
			lb.hundredAtOnce()
		}
	}
	b.StopTimer()

	f1, f100 := fresh.report("fresh-1", fresh.one), fresh.report("fresh-100", fresh.burst)
	l1, l100 := later.report("later-1", later.one), later.report("later-100", later.burst)
	b.ReportMetric(l1/f1, "later/fresh-1")
	b.ReportMetric(l100/f100, "later/fresh-100")
	b.ReportMetric(fresh.cpu.Seconds()*1000/float64(len(fresh.one)+len(fresh.burst)), "fresh-cpu-ms/lease")
	b.ReportMetric(later.cpu.Seconds()*1000/float64(len(later.one)+len(later.burst)), "later-cpu-ms/lease")
	b.ReportMetric(historyRate, "history-leases/s")
}

// turns orders the two stacks for a round: each goes first every other round.
func turns(round int, a, b *leaseBench) []*leaseBench {
	if round%2 == 1 {
		return []*leaseBench{b, a}
	}
	return []*leaseBench{a, b}
}

// leaseBench is one stack of BenchmarkLeaseAfterHistory with what was
// measured on it: lease times one at a time and in bursts, and the
// process's CPU time spent in its measured rounds.
type leaseBench struct {
	b          *testing.B
	e          *apitest.Env
	one, burst []time.Duration
	cpu        time.Duration
}

func newLeaseBench(b *testing.B) *leaseBench {
	e := newEnv(b)
	e.NotAPI = true // measured, not checked: the handler tests validate these answers
	benchTemplate(b, e)
	lb := &leaseBench{b: b, e: e}
	// The first lease reads the template and writes the token's lastUsed.
	lb.del(lb.lease())
	return lb
}

func (lb *leaseBench) lease() string {
	id, _ := lb.timedLease()
	return id
}

func (lb *leaseBench) timedLease() (string, time.Duration) {
	start := time.Now()
	r := lb.e.Do(http.MethodPost, "/v1/environments", apitest.AliceToken, `{"template":"bench","labels":{"team":"web"}}`)
	took := time.Since(start)
	if r.Status != 201 {
		lb.b.Errorf("lease: %d %s", r.Status, r.Body)
		return "", took
	}
	var out struct {
		Environment struct{ ID string } `json:"environment"`
	}
	r.JSON(lb.b, &out)
	return out.Environment.ID, took
}

func (lb *leaseBench) del(id string) {
	if r := lb.e.Do(http.MethodDelete, "/v1/environments/"+id, apitest.AliceToken, nil); r.Status != 200 {
		lb.b.Errorf("delete: %d %s", r.Status, r.Body)
	}
}

// oneAtATime leases n times in a row, deleting each (untimed) before the next.
func (lb *leaseBench) oneAtATime(n int) {
	for range n {
		c := cpuTime()
		id, d := lb.timedLease()
		lb.cpu += cpuTime() - c
		lb.one = append(lb.one, d)
		lb.del(id)
	}
}

// hundredAtOnce starts 100 leases together, then deletes them (untimed).
func (lb *leaseBench) hundredAtOnce() {
	ids, ds := make([]string, 100), make([]time.Duration, 100)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range 100 {
		wg.Go(func() {
			<-gate
			ids[i], ds[i] = lb.timedLease()
		})
	}
	c := cpuTime()
	close(gate)
	wg.Wait()
	lb.cpu += cpuTime() - c
	lb.burst = append(lb.burst, ds...)
	for _, id := range ids {
		lb.del(id)
	}
}

func (lb *leaseBench) report(name string, d []time.Duration) float64 {
	med := quantile(d, 0.5)
	lb.b.ReportMetric(med, name+"-median-ms")
	lb.b.ReportMetric(quantile(d, 0.99), name+"-p99-ms")
	return med
}

// cpuTime is the CPU time this process has used, user and system: on a
// machine shared with other work it is steadier than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// quantile is the q-quantile of d in milliseconds (nearest rank).
func quantile(d []time.Duration, q float64) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i].Microseconds()) / 1000
}
