//go:build linux

package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
	"github.com/envlease/envlease/shared/timeouts"
)

// A container whose template pauses when idle: the timeout job's pause
// checkpoint holds its writable layer (taken under runc pause), the
// container leaves its node, and a tunnel asked for wakes it: restored from
// the checkpoint, verified, its command started again, serving the files
// it made before the pause. runc and busybox for real.
func TestContainerPauseWakesOnTunnel(t *testing.T) {
	ref := busyboxRef(t)
	s, _ := withArtifacts(t, domain.Template{
		Name: "napper", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref}, Command: []string{"sh", "-c", savedBox},
		Workdir: "/work", Exports: map[string]domain.Export{"web": {Port: 8080}},
		Timeouts: domain.Timeouts{Idle: domain.Duration(time.Second), Hard: domain.Duration(time.Hour)},
		Idle:     &domain.Idle{Action: domain.IdlePause, Retention: domain.Duration(time.Hour)},
		Quota:    domain.Quota{MaxLeases: 2, MaxPaused: 2},
	})
	s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) { c.ReadyTimeout = time.Minute })
	ctx := context.Background()

	// The stack gives its templates its own timeouts: the lease asks 1 s idle.
	r := s.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{"template": "napper", "idle": "1s"})
	if r.Status != 201 {
		t.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	var leased environments.Leased
	r.JSON(t, &leased)
	id := leased.Environment.ID
	s.waitLong(t, id, domain.StateReady)
	// Idle: the service's clock (a fake one, kept at the real time, as
	// presigned links and tickets are judged by it) passes its idle deadline.
	time.Sleep(1500 * time.Millisecond)
	var paused domain.Environment
	for deadline := time.Now().Add(3 * time.Minute); ; {
		s.Clock.Set(time.Now())
		if _, err := timeouts.Run(ctx, s.Store, s.Clock, timeouts.Options{}); err != nil {
			t.Fatal(err)
		}
		e, err := s.Store.GetEnvironment(ctx, "acme", id)
		if err != nil {
			t.Fatal(err)
		}
		if e.State == domain.StatePaused && e.Node == "" {
			paused = e
			break
		}
		if e.State != domain.StateReady && e.State != domain.StatePaused {
			t.Fatalf("went %s (%s: %s) instead of paused", e.State, e.StopReason, e.Error)
		}
		if time.Now().After(deadline) {
			t.Fatalf("never paused: %+v checkpoint %+v", e, e.Checkpoint)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if paused.Checkpoint == nil || !paused.Checkpoint.Pause || paused.Snapshot != paused.Checkpoint.Artifact {
		t.Fatalf("paused with %+v, snapshot %s", paused.Checkpoint, paused.Snapshot)
	}

	// A tunnel asked for wakes it; the API answers 503 waking until it is
	// ready, and the caller asks again.
	var woken domain.Environment
	for deadline := time.Now().Add(3 * time.Minute); ; {
		s.Clock.Set(time.Now())
		r := s.Do("POST", "/v1/environments/"+id+"/tunnel", apitest.BobToken, nil)
		if r.Status == 200 {
			break
		}
		if r.Status != 503 || !strings.Contains(string(r.Body), `"waking"`) {
			t.Fatalf("tunnel of a paused container: %d %s", r.Status, r.Body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("never woke: %s", r.Body)
		}
	}
	woken = s.waitLong(t, id, domain.StateReady)
	if woken.Restored == nil || woken.Restored.Key != paused.Snapshot || woken.Resumed == nil {
		t.Fatalf("woken %+v restored %+v", woken, woken.Restored)
	}
	if got := s.getThroughTunnel(t, id, woken.Exports[0].Target, "/a/one.txt"); got != "alpha\n" {
		t.Errorf("the woken container serves %q", got)
	}
}
