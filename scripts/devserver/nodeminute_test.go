package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
)

// What a node costs, read from the local stack's request log: every node
// protocol message a handler took is one JSON line ("method": "WS") naming
// its node and its DynamoDB calls (ddb_calls). docs/scale.md, "What a node
// costs", records the figures.

// requestLog is the stack's JSON log, kept to be read.
type requestLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *requestLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// mark is where the log is now; since reads what came after a mark.
func (l *requestLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Len()
}

// nodeCost is what one node's messages cost in a window of the log.
type nodeCost struct {
	Messages int            `json:"messages"`
	DDBCalls int            `json:"ddbCalls"`
	Routes   map[string]int `json:"routes"`
}

// since sums, per node, the node protocol messages a handler took after
// mark and their DynamoDB calls.
func (l *requestLog) since(mark int) map[string]*nodeCost {
	l.mu.Lock()
	b := bytes.Clone(l.buf.Bytes()[mark:])
	l.mu.Unlock()
	out := map[string]*nodeCost{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg      string `json:"msg"`
			Method   string `json:"method"`
			Route    string `json:"route"`
			Node     string `json:"node"`
			DDBCalls int    `json:"ddb_calls"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != "request" || line.Method != "WS" || line.Node == "" {
			continue
		}
		c := out[line.Node]
		if c == nil {
			c = &nodeCost{Routes: map[string]int{}}
			out[line.Node] = c
		}
		c.Messages++
		c.DDBCalls += line.DDBCalls
		c.Routes[line.Route]++
	}
	return out
}

// loggedStack runs the local stack with its log kept, and acme's sleeper
// allowed enough leases to fill a node with busy environments.
func loggedStack(tb testing.TB, busy int) (string, *requestLog) {
	tb.Helper()
	var f map[string]any
	if err := json.Unmarshal(demoFixture, &f); err != nil {
		tb.Fatal(err)
	}
	for _, o := range f["orgs"].([]any) {
		org := o.(map[string]any)
		if org["id"] != "acme" {
			continue
		}
		for _, t := range org["templates"].([]any) {
			if tpl := t.(map[string]any); tpl["name"] == "sleeper" {
				tpl["quota"] = map[string]any{"maxLeases": busy}
			}
		}
	}
	b, _ := json.Marshal(f)
	path := filepath.Join(tb.TempDir(), "fixture.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	logs := &requestLog{}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var out bytes.Buffer
	o := options{addr: "127.0.0.1:0", sweep: time.Second, out: &out, ready: func(u string) { ready <- u }, fixture: path}
	if !externalEndpoints() {
		o.testDynamo = devstack.NewTestDynamo(tb)
	}
	go func() { done <- run(ctx, o, slog.New(slog.NewJSONHandler(logs, nil))) }()
	var base string
	select {
	case base = <-ready:
	case err := <-done:
		tb.Fatalf("devserver stopped: %v", err)
	case <-time.After(5 * time.Minute):
		tb.Fatal("devserver did not start")
	}
	tb.Cleanup(func() { cancel(); <-done })
	return base, logs
}

// busyNode leases n sleepers of acme, waits until they are ready and the
// node has reported them on a heartbeat, and returns the node and them.
func busyNode(tb testing.TB, base string, logs *requestLog, n int) (string, []string) {
	tb.Helper()
	c := api{t: tb, base: base, token: apitest.BobToken}
	node := ""
	var ids []string
	for range n {
		var leased envAnswer
		if s := c.do("POST", "/v1/environments", map[string]any{"template": "sleeper"}, &leased); s != 201 {
			tb.Fatalf("lease: %d", s)
		}
		ids = append(ids, leased.Environment.ID)
	}
	for _, id := range ids {
		e := c.waitState(id, domain.StateReady, time.Minute)
		if node != "" && e.Node != node {
			tb.Fatalf("the sleepers run on %s and %s: want one node", node, e.Node)
		}
		node = e.Node
	}
	// Offers queued while the node was claiming (one per lease, and the
	// re-offer job's) each still cost it a claim answered with nothing; on
	// a busy machine they drain after the environments are ready. Wait
	// until twenty looks in a row find none (a wait, not a measurement).
	quiet, calm := logs.mark(), 0
	for deadline := time.Now().Add(time.Minute); calm < 20; time.Sleep(100 * time.Millisecond) {
		if c := logs.since(quiet)[node]; c != nil && c.Routes["WS claim"] > 0 {
			quiet, calm = logs.mark(), 0
		} else {
			calm++
		}
		if time.Now().After(deadline) {
			tb.Fatal("the node kept claiming for a minute after its environments were ready")
		}
	}
	// The beat that names the last of them (the node's next tick).
	mark := logs.mark()
	deadline := time.Now().Add(time.Minute)
	for logs.since(mark)[node] == nil || logs.since(mark)[node].Routes["WS heartbeat"] == 0 {
		if time.Now().After(deadline) {
			tb.Fatal("the node did not report its environments")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return node, ids
}

// activeNodes are the stack's active nodes, of every organization.
func activeNodes(tb testing.TB, base string) []string {
	tb.Helper()
	var out []string
	for _, tok := range []string{apitest.AliceToken, apitest.CarolToken} {
		var list struct {
			Nodes []domain.Node `json:"nodes"`
		}
		if s := (api{t: tb, base: base, token: tok}).do("GET", "/v1/nodes", nil, &list); s != 200 {
			tb.Fatalf("list nodes: %d", s)
		}
		for _, n := range list.Nodes {
			if n.State == domain.NodeActive {
				out = append(out, n.ID)
			}
		}
	}
	return out
}

// Between two deadline beats a node sends nothing that reaches a handler,
// whether it runs nothing or ten environments: over a window shorter than
// the deadline's minute each node sends at most the one deadline beat, for
// at most two DynamoDB calls. A stop reaches the busy node as a stop
// message, and costs it its report and one beat naming what changed.
func TestNodeMessagesBetweenDeadlineBeats(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the local stack for several seconds")
	}
	const busy = 10
	base, logs := loggedStack(t, busy)
	node, ids := busyNode(t, base, logs, busy)
	mark := logs.mark()
	time.Sleep(5 * time.Second) // five heartbeat ticks of the local stack
	costs := logs.since(mark)
	for n, c := range costs {
		if c.Messages > 1 || c.DDBCalls > 2 || c.Routes["WS heartbeat"] != c.Messages {
			t.Errorf("node %s (busy: %v) in 5 s: %+v; want at most its one deadline beat", n, n == node, c)
		}
	}

	// A delete: one stop message, then the node's report and one beat.
	c := api{t: t, base: base, token: apitest.BobToken}
	id := ids[0]
	mark = logs.mark()
	if s := c.do("DELETE", "/v1/environments/"+id, nil, nil); s != 200 {
		t.Fatalf("delete: %d", s)
	}
	c.waitState(id, domain.StateStopped, time.Minute)
	deadline := time.Now().Add(time.Minute)
	for logs.since(mark)[node] == nil || logs.since(mark)[node].Routes["WS heartbeat"] == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the node did not beat after the stop")
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := logs.since(mark)[node]
	if got.Routes["WS report"] != 1 || got.Routes["WS heartbeat"] > 2 || got.Messages > 3 {
		t.Fatalf("the busy node's messages for a stop: %+v; want its report and a beat (and at most its deadline beat)", got)
	}
}

// BenchmarkNodeMinute reads the local stack's request log for two minutes
// with one node running ten environments and the others idle, and reports
// per node-minute the node protocol messages that reached a handler and
// their DynamoDB calls (the stack's heartbeat is one a second; in AWS ten:
// either way a node without changes sends one deadline beat a minute).
//
//	go test ./scripts/devserver -run '^$' -bench NodeMinute -benchtime 1x -timeout 10m
func BenchmarkNodeMinute(b *testing.B) {
	const busy = 10
	const window = 2 * time.Minute
	base, logs := loggedStack(b, busy)
	node, _ := busyNode(b, base, logs, busy)
	nodes := activeNodes(b, base)
	var costs map[string]*nodeCost
	for b.Loop() {
		mark := logs.mark()
		time.Sleep(window)
		costs = logs.since(mark)
	}
	var idleMsgs, idleCalls, idle float64
	for _, n := range nodes {
		c := costs[n]
		if c == nil {
			c = &nodeCost{}
		}
		b.Logf("node %s (busy %v): %+v", n, n == node, *c)
		if n != node {
			idle++
			idleMsgs += float64(c.Messages)
			idleCalls += float64(c.DDBCalls)
		}
	}
	bc := costs[node]
	if bc == nil {
		bc = &nodeCost{}
	}
	b.ReportMetric(float64(bc.Messages)/window.Minutes(), "busy-msgs/node-min")
	b.ReportMetric(float64(bc.DDBCalls)/window.Minutes(), "busy-ddb/node-min")
	if idle > 0 {
		b.ReportMetric(idleMsgs/idle/window.Minutes(), "idle-msgs/node-min")
		b.ReportMetric(idleCalls/idle/window.Minutes(), "idle-ddb/node-min")
	}
}
