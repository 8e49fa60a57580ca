package agent_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/store"
)

// BenchmarkIdleNodeCalls runs one idle agent over the node protocol against
// the local node protocol server with the service's default timing on the
// real clock (deadline written once a minute, lost after one more minute
// of silence) and the local stack's heartbeat of one a second, and counts,
// with store.CallCounter on the service's store, the DynamoDB calls its
// node costs over two minutes after it connected. No request is held open
// meanwhile: every message is answered at once. docs/nodes.md (Figures)
// records the figures. It takes two minutes.
func BenchmarkIdleNodeCalls(b *testing.B) {
	calls := store.NewCallCounter()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var sockets *nodes.LocalSockets
	var svc *nodes.Service
	e := apitest.New(b, func(e *apitest.Env) [][]httpapi.Route {
		counted := e.Store.WithClient(dynamodb.New(e.Store.DB().Options(), calls.Option))
		svc = nodes.NewService(counted, nil, clock.System{}, nodes.Options{HeartbeatInterval: time.Second,
			SocketURL: "ws" + strings.TrimPrefix(srv.URL, "http") + nodes.SocketPath})
		sockets = nodes.NewLocalSockets(ctx, nodes.NewSocket(svc, counted, e.Log), apitest.NewAuth(e))
		return [][]httpapi.Route{nodes.Routes(svc), environments.Routes(environments.NewService(e.Store, clock.System{}))}
	})
	mux.Handle(nodes.SocketPath, sockets)
	mux.Handle("/", e.Handler)
	issued, err := svc.IssueCredential(ctx, domain.Principal{OrgID: "acme", UserID: "alice", Role: domain.RoleAdmin, Credential: domain.CredentialCLI}, "local", "bench")
	if err != nil {
		b.Fatal(err)
	}
	a, err := agent.New(agent.Config{API: srv.URL, Token: issued.Token, Address: "127.0.0.1", WorkDir: b.TempDir(),
		NoWarm: true, NoTunnel: true, Log: apitest.DiscardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done; sockets.Close() }()
	for a.Transport() != agent.TransportWebSocket {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // its first beat wrote the deadline
	const window = 2 * time.Minute
	for b.Loop() {
		calls.Reset()
		time.Sleep(window)
	}
	b.ReportMetric(float64(calls.Total())/window.Minutes(), "ddb-calls-per-minute")
	b.Logf("calls in %s: %v; open connections: %d", window, calls.Counts(), sockets.Connections())
}
