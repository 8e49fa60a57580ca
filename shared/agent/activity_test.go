package agent_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
)

// Bytes through a tunnel are the environment's activity, measured on the
// node: a GET through the tunnel moves its idle deadline, with no touch,
// once a quarter of its idle timeout has passed since it started (the
// agent on the stack's clock); a template that does not count tunnels
// keeps its deadline.
func TestTunnelBytesAreActivity(t *testing.T) {
	web := func(name string, idle *domain.Idle) domain.Template {
		return domain.Template{
			Name: name, Idle: idle,
			Command: []string{"sh", "-c", `echo hi > index.html; exec python3 -m http.server "$PORT" --bind 127.0.0.1`},
			Exports: map[string]domain.Export{"web": {Port: 0}},
		}
	}
	s := newStack(t, web("counted", nil), web("uncounted", &domain.Idle{Activity: []string{domain.ActivityCPU}}))
	s.Clock.Set(time.Now())
	s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) { c.Now = s.Clock.Now })
	// Each idles after 30 minutes of its hour, so activity has room to move
	// its deadline.
	lease := func(template string) string {
		r := s.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{"template": template, "idle": "30m"})
		if r.Status != http.StatusCreated {
			t.Fatalf("lease: %d %s", r.Status, r.Body)
		}
		var l environments.Leased
		r.JSON(t, &l)
		return l.Environment.ID
	}
	counted, uncounted := lease("counted"), lease("uncounted")
	a := s.wait(t, counted, domain.StateReady)
	b := s.wait(t, uncounted, domain.StateReady)
	// A quarter of the 30-minute idle timeout is 7.5 minutes.
	s.Clock.Advance(8 * time.Minute)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if got := s.getThroughTunnel(t, counted, a.Exports[0].Target, "/"); got != "hi\n" {
			t.Fatalf("through the tunnel: %q", got)
		}
		if got := s.getThroughTunnel(t, uncounted, b.Exports[0].Target, "/"); got != "hi\n" {
			t.Fatalf("through the tunnel: %q", got)
		}
		if e := s.wait(t, counted, domain.StateReady); e.IdleUntil.After(a.IdleUntil) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the tunnel's bytes did not move the idle deadline")
		}
	}
	// Its beats went out (the counted one's report came with one): the
	// other's deadline never moved.
	time.Sleep(2 * time.Second)
	if e := s.wait(t, uncounted, domain.StateReady); !e.IdleUntil.Equal(b.IdleUntil) {
		t.Fatalf("a template that does not count tunnels: idle deadline moved from %s to %s", b.IdleUntil, e.IdleUntil)
	}
}
