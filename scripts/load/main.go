// Command load drives a running dev server with a realistic mix of API calls
// through vegeta (a Go load generator, pinned in go.mod, used as a library)
// and prints req/s, p50 and p99 per endpoint. It starts nothing itself: point
// it at a server with -url. With -log it also reads the server's captured
// request log (JSON lines on stderr) and prints the DynamoDB calls per request
// of each route. It is bounded by -duration and -max and stops by itself.
//
//	go run ./scripts/devserver 2>devserver.log &
//	go run ./scripts/load -url http://127.0.0.1:8080 -log devserver.log
//
// scripts/load/run.sh does both on a spare port.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/envlease/envlease/shared/client"
)

func main() {
	base := flag.String("url", "http://127.0.0.1:8080", "base URL of a running dev server (empty: only read -log)")
	fixture := flag.String("fixture", "scripts/devserver/demo.json", "the server's organization configuration, for the demo tokens")
	rate := flag.Int("rate", 100, "requests per second")
	duration := flag.Duration("duration", 20*time.Second, "how long to send requests")
	maxReq := flag.Int("max", 5000, "stop after this many requests")
	workers := flag.Uint64("workers", 8, "concurrent connections")
	logFile := flag.String("log", "", "the server's captured request log: print DynamoDB calls per request per route")
	flag.Parse()

	if *base != "" {
		if err := run(strings.TrimSuffix(*base, "/"), *fixture, *rate, *duration, *maxReq, *workers); err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			os.Exit(1)
		}
	}
	if *logFile != "" {
		// The server logs a request after answering it; let the last lines land.
		time.Sleep(300 * time.Millisecond)
		if err := ddbCalls(*logFile, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			os.Exit(1)
		}
	}
}

// tokens reads the demo users' tokens of the first organization: an admin
// and a member.
func tokens(path string) (admin, member string, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	var f struct {
		Orgs []struct {
			Users []struct {
				Role   string   `json:"role"`
				Tokens []string `json:"tokens"`
			} `json:"users"`
		} `json:"orgs"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return "", "", err
	}
	if len(f.Orgs) == 0 {
		return "", "", errors.New("no organization in " + path)
	}
	for _, u := range f.Orgs[0].Users {
		if len(u.Tokens) == 0 {
			continue
		}
		switch {
		case u.Role == "admin" && admin == "":
			admin = u.Tokens[0]
		case u.Role == "member" && member == "":
			member = u.Tokens[0]
		}
	}
	if admin == "" || member == "" {
		return "", "", errors.New("the first organization needs an admin and a member with tokens")
	}
	return admin, member, nil
}

// mix is the state the targeter draws requests from: the environments this
// run leased and has not deleted yet.
type mix struct {
	base, token, artifact string
	capacity              int // live environments the quotas allow
	max                   int

	mu      sync.Mutex
	live    []string
	leasing int // leases sent, not answered yet
	sent    int
	rnd     *rand.Rand
}

// The weights of the mix, out of 100: mostly reads and touches, as a fleet of
// clients polling their environments and running commands in them would send.
const (
	wGet       = 28
	wList      = 14
	wTouch     = 16
	wLease     = 12
	wDelete    = 10
	wTemplates = 5
	wQuotas    = 5
	wLink      = 6
	wArtifacts = 4
)

func (m *mix) next(t *vegeta.Target) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sent >= m.max {
		return vegeta.ErrNoTargets
	}
	m.sent++
	t.Header = http.Header{"Authorization": {"Bearer " + m.token}, "Content-Type": {"application/json"}}
	t.Body = nil
	pick := m.rnd.IntN(100)
	full := len(m.live)+m.leasing >= m.capacity
	env := ""
	if len(m.live) > 0 {
		env = m.live[m.rnd.IntN(len(m.live))]
	}
	kind := "artifacts"
	for _, w := range []struct {
		kind   string
		weight int
	}{{"get", wGet}, {"list", wList}, {"touch", wTouch}, {"lease", wLease}, {"delete", wDelete},
		{"templates", wTemplates}, {"quotas", wQuotas}, {"link", wLink}} {
		if pick < w.weight {
			kind = w.kind
			break
		}
		pick -= w.weight
	}
	// Reads and touches need a live environment, and leases a free place:
	// without one, lease; when the quotas are full, delete one instead.
	if (kind == "get" || kind == "touch" || kind == "delete") && env == "" {
		kind = "lease"
	}
	if kind == "lease" && full {
		kind = "delete"
		if env == "" { // every place is taken by leases still in flight
			kind = "list"
		}
	}
	switch kind {
	case "get":
		t.Method, t.URL = "GET", m.base+"/v1/environments/"+env
	case "list":
		t.Method, t.URL = "GET", m.base+"/v1/environments"
	case "touch":
		t.Method, t.URL = "POST", m.base+"/v1/environments/"+env+"/touch"
	case "delete":
		t.Method, t.URL = "DELETE", m.base+"/v1/environments/"+env
		m.remove(env)
	case "lease":
		tpl := "sleeper"
		if m.rnd.IntN(2) == 0 {
			tpl = "shell"
		}
		t.Method, t.URL = "POST", m.base+"/v1/environments"
		t.Body = []byte(`{"template":"` + tpl + `","labels":{"run":"load"}}`)
		m.leasing++
	case "templates":
		t.Method, t.URL = "GET", m.base+"/v1/templates"
	case "quotas":
		t.Method, t.URL = "GET", m.base+"/v1/quotas"
	case "link":
		t.Method, t.URL = "POST", m.base+"/v1/artifacts/"+m.artifact+"/links"
		t.Body = []byte(`{"expires":"1h"}`)
	default:
		t.Method, t.URL = "GET", m.base+"/v1/artifacts"
	}
	return nil
}

func (m *mix) remove(id string) {
	for i, v := range m.live {
		if v == id {
			m.live = append(m.live[:i], m.live[i+1:]...)
			return
		}
	}
}

// observe learns from an answer: a lease adds its environment to the pool.
func (m *mix) observe(r *vegeta.Result) {
	if r.Method != "POST" || !strings.HasSuffix(r.URL, "/v1/environments") {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leasing--
	if r.Code != http.StatusCreated {
		return
	}
	var out struct {
		Environment struct{ ID string } `json:"environment"`
	}
	if json.Unmarshal(r.Body, &out) == nil && out.Environment.ID != "" {
		m.live = append(m.live, out.Environment.ID)
	}
}

// endpoint names a request by its route, as the server's log does.
func endpoint(method, url, base string) string {
	p := strings.TrimPrefix(url, base)
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	parts := strings.Split(p, "/")
	if len(parts) > 3 {
		parts[3] = "{id}"
	}
	return method + " " + strings.Join(parts, "/")
}

func run(base, fixture string, rate int, duration time.Duration, maxReq int, workers uint64) error {
	admin, member, err := tokens(fixture)
	if err != nil {
		return fmt.Errorf("demo tokens: %w", err)
	}
	ctx := context.Background()
	asMember, err := client.New(base, member)
	if err != nil {
		return err
	}
	asAdmin, err := client.New(base, admin)
	if err != nil {
		return err
	}
	capacity, err := leaseCapacity(ctx, asMember, base)
	if err != nil {
		return err
	}
	art, err := sealedArtifact(ctx, asAdmin)
	if err != nil {
		return fmt.Errorf("create the artifact links are made for: %w", err)
	}
	m := &mix{base: base, token: member, artifact: art, capacity: capacity, max: maxReq, rnd: rand.New(rand.NewPCG(1, 2))}
	attacker := vegeta.NewAttacker(vegeta.Workers(workers), vegeta.MaxWorkers(workers), vegeta.Connections(int(workers)),
		vegeta.KeepAlive(true), vegeta.Timeout(10*time.Second), vegeta.MaxBody(64<<10))
	per := map[string]*vegeta.Metrics{}
	var total vegeta.Metrics
	start := time.Now()
	fmt.Fprintf(os.Stderr, "load: %d req/s for up to %s or %d requests against %s (lease capacity %d)\n", rate, duration, maxReq, base, capacity)
	for res := range attacker.Attack(vegeta.Targeter(m.next), vegeta.Rate{Freq: rate, Per: time.Second}, duration, "envlease") {
		m.observe(res)
		name := endpoint(res.Method, res.URL, base)
		if per[name] == nil {
			per[name] = &vegeta.Metrics{}
		}
		per[name].Add(res)
		total.Add(res)
	}
	elapsed := time.Since(start)
	total.Close()

	names := make([]string, 0, len(per))
	for n := range per {
		per[n].Close()
		names = append(names, n)
	}
	sort.Strings(names)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "endpoint\trequests\treq/s\tp50\tp99\tstatus codes\n")
	for _, n := range names {
		mt := per[n]
		fmt.Fprintf(w, "%s\t%d\t%.1f\t%s\t%s\t%s\n", n, mt.Requests, float64(mt.Requests)/elapsed.Seconds(),
			ms(mt.Latencies.P50), ms(mt.Latencies.P99), codes(mt.StatusCodes))
	}
	fmt.Fprintf(w, "all\t%d\t%.1f\t%s\t%s\t%s\n", total.Requests, float64(total.Requests)/elapsed.Seconds(),
		ms(total.Latencies.P50), ms(total.Latencies.P99), codes(total.StatusCodes))
	w.Flush()
	if len(total.Errors) > 0 {
		fmt.Fprintf(os.Stderr, "load: errors: %v\n", total.Errors)
	}

	// Leave the server as it was: delete what this run leased.
	m.mu.Lock()
	live := append([]string(nil), m.live...)
	m.mu.Unlock()
	for _, id := range live {
		if _, err := asMember.DeleteEnvironment(ctx, id); err != nil {
			return fmt.Errorf("clean up %s: %w", id, err)
		}
	}
	if n := total.StatusCodes["0"] + total.StatusCodes["500"]; n > 0 {
		return fmt.Errorf("%d requests failed or answered 500", n)
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func codes(m map[string]int) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// leaseCapacity is how many environments the member may have live at once:
// the sum of the quotas' free places.
func leaseCapacity(ctx context.Context, c *client.Client, base string) (int, error) {
	qs, err := c.Quotas(ctx)
	if err != nil {
		return 0, fmt.Errorf("is the dev server running at %s? %w", base, err)
	}
	n := 0
	for _, q := range qs {
		n += q.MaxLeases - q.Running
	}
	return n, nil
}

// sealedArtifact pushes one small artifact through the API (create, the
// presigned PUT, complete), so the run can make links for it.
func sealedArtifact(ctx context.Context, c *client.Client) (string, error) {
	data := []byte("envlease load test artifact\n")
	a, err := c.Push(ctx, bytes.NewReader(data), int64(len(data)),
		client.ArtifactCreate{Name: "load.txt", ContentType: "text/plain", Expires: "1h"}, client.PushOptions{})
	if err != nil {
		return "", err
	}
	return a.ID, nil
}

// ddbCalls prints, per route, the requests the server logged and their
// average DynamoDB calls (the request log's route and ddb_calls fields).
func ddbCalls(path string, out io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	type agg struct{ n, calls, max int }
	by := map[string]*agg{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Msg      string `json:"msg"`
			Route    string `json:"route"`
			DDBCalls *int   `json:"ddb_calls"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "request" || l.Route == "" || l.DDBCalls == nil {
			continue
		}
		a := by[l.Route]
		if a == nil {
			a = &agg{}
			by[l.Route] = a
		}
		a.n++
		a.calls += *l.DDBCalls
		a.max = max(a.max, *l.DDBCalls)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(by) == 0 {
		return fmt.Errorf("%s has no request lines with route and ddb_calls", path)
	}
	routes := make([]string, 0, len(by))
	for r := range by {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "route\trequests\tDynamoDB calls/request\tmax\n")
	for _, r := range routes {
		a := by[r]
		fmt.Fprintf(w, "%s\t%d\t%.2f\t%d\n", r, a.n, float64(a.calls)/float64(a.n), a.max)
	}
	return w.Flush()
}
