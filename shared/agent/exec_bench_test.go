//go:build linux

package agent_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/execsession"
	"github.com/envlease/envlease/shared/httpapi"
	"github.com/envlease/envlease/shared/nodes"
)

// BenchmarkExecRoundTrip is `envlease exec ENV -- true` without the CLI's
// own start: the API's ticket (its event written), the session to the
// agent, the command started inside the environment and its exit code
// back, for each runtime.
//
//	go test ./shared/agent -run '^$' -bench ExecRoundTrip -benchtime 50x
func BenchmarkExecRoundTrip(b *testing.B) {
	for _, rt := range []struct {
		name string
		tpl  func(b *testing.B) domain.Template
	}{
		{"process", func(*testing.B) domain.Template {
			return domain.Template{Name: "box", Command: []string{"sh", "-c", "exec sleep 3600"}}
		}},
		{"container", func(b *testing.B) domain.Template {
			return domain.Template{Name: "box", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: busyboxRef(b)},
				Command: []string{"sh", "-c", "exec sleep 3600"}}
		}},
	} {
		b.Run(rt.name, func(b *testing.B) {
			s, id := benchEnv(b, rt.tpl(b))
			argv := []string{"true"}
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				x := benchTicket(b, s, id, argv)
				code, err := execsession.Run(ctx, x.URL, x.Ticket, execsession.Options{Command: argv})
				if err != nil || code != 0 {
					b.Fatalf("exec true: %d %v", code, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/exec")
		})
	}
}

// benchEnv serves the API as newStack does, runs an agent and leases a
// ready environment of tpl; it is newStack's setup for a benchmark.
func benchEnv(b *testing.B, tpl domain.Template) (*stack, string) {
	e := apitest.New(b, func(e *apitest.Env) [][]httpapi.Route {
		svc := nodes.NewService(e.Store, nil, e.Clock, nodes.Options{HeartbeatInterval: 200 * time.Millisecond, PollMax: 20 * time.Millisecond})
		return [][]httpapi.Route{nodes.Routes(svc), environments.Routes(environments.NewService(e.Store, e.Clock))}
	})
	e.Clock.Set(time.Now()) // the agent judges tickets by the real clock
	tpl.Pools = []string{"local"}
	tpl.Timeouts = domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(time.Hour)}
	tpl.Quota = domain.Quota{MaxLeases: 5}
	if err := e.Store.PutTemplate(context.Background(), "acme", tpl); err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler)
	b.Cleanup(srv.Close)
	s := &stack{Env: e, url: srv.URL}
	svc := nodes.NewService(s.Store, nil, s.Clock, nodes.Options{})
	admin := domain.Principal{OrgID: "acme", UserID: "alice", Role: domain.RoleAdmin, Credential: domain.CredentialCLI}
	issued, err := svc.IssueCredential(context.Background(), admin, "local", "bench agent")
	if err != nil {
		b.Fatal(err)
	}
	a, err := agent.New(agent.Config{API: s.url, Token: issued.Token, Address: "127.0.0.1", WorkDir: b.TempDir(), Capacity: 4,
		Grace: time.Second, ReadyTimeout: time.Minute, ClaimWait: time.Second, Log: s.Log})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	r := s.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{"template": tpl.Name})
	if r.Status != 201 {
		b.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	var leased environments.Leased
	r.JSON(b, &leased)
	id := leased.Environment.ID
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var env domain.Environment
		s.Do("GET", "/v1/environments/"+id, apitest.BobToken, nil).JSON(b, &env)
		if env.State == domain.StateReady {
			return s, id
		}
		if !env.State.Live() || time.Now().After(deadline) {
			b.Fatalf("%s is %s (%q)", id, env.State, env.Error)
		}
	}
}

func benchTicket(b *testing.B, s *stack, id string, argv []string) environments.Exec {
	r := s.Do("POST", "/v1/environments/"+id+"/exec", apitest.BobToken, map[string]any{"command": argv})
	if r.Status != 200 {
		b.Fatalf("exec ticket: %d %s", r.Status, r.Body)
	}
	var x environments.Exec
	r.JSON(b, &x)
	return x
}
