package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/timeouts"
)

// dozerTemplate pauses when idle (4 s without use, for the test), and
// serves its folder, so a tunnel reads its files.
var dozerTemplate = domain.Template{
	Name: "dozer", Description: "serves its folder; pauses when idle",
	Command:  []string{"sh", "-c", `exec python3 -m http.server "$PORT" --bind 127.0.0.1`},
	Runtime:  "process",
	Timeouts: domain.Timeouts{Idle: domain.Duration(4 * time.Second), Hard: domain.Duration(time.Hour)},
	Exports:  map[string]domain.Export{"web": {}},
	Idle:     &domain.Idle{Action: domain.IdlePause, Retention: domain.Duration(time.Hour)},
	Quota:    domain.Quota{MaxLeases: 2, MaxPaused: 2},
}

// briefTemplate keeps a paused environment 2 s only.
var briefTemplate = func() domain.Template {
	t := dozerTemplate
	t.Name = "brief"
	t.Idle = &domain.Idle{Action: domain.IdlePause, Retention: domain.Duration(2 * time.Second)}
	return t
}()

// untilPaused runs the timeout job once the environment has been idle, and
// waits until it is paused and its node has let it go.
func untilPaused(t *testing.T, s *clienttest.Stack, bob *client.Client, id string) domain.Environment {
	t.Helper()
	time.Sleep(5 * time.Second) // past the 4 s idle timeout, with nothing using it
	return s.UntilPaused(t, bob, id, 2*time.Minute)
}

// An environment nobody uses is paused (a verified checkpoint, no node, a
// paused slot instead of a running one), then woken by an exec and by a
// connection through a port-forward held open across the pause, with its
// files each time; `envlease ls` shows it paused, `wake` wakes it, and one
// past its retention is deleted, saying why. The process runtime, for real.
func TestPauseWakeByExecAndTunnel(t *testing.T) {
	s := clienttest.Start(t, clienttest.WithTemplates("acme", dozerTemplate, briefTemplate))
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	ctx := context.Background()
	bob, err := client.New(s.URL, clienttest.BobToken)
	if err != nil {
		t.Fatal(err)
	}
	var sb domain.Sandbox
	u.json(&sb, "sandbox", "register", "--name", "laptop")
	var leased client.Leased
	u.json(&leased, "lease", "--template", "dozer", "--wait")
	id := leased.Environment.ID
	u.ok("exec", id, "--", "sh", "-c", "echo kept > note.txt")

	paused := untilPaused(t, s, bob, id)
	if paused.StopReason != "idle" || paused.Snapshot == "" || paused.RetainUntil == nil || paused.Checkpoint == nil || !paused.Checkpoint.Pause {
		t.Fatalf("paused: %+v", paused)
	}
	contains(t, "get", u.ok("get", id), "PAUSED", "(idle), kept until")
	ls := u.ok("ls")
	if !strings.Contains(ls, id) || !strings.Contains(ls, "paused") || !strings.Contains(ls, "kept until") {
		t.Fatalf("ls does not show it paused:\n%s", ls)
	}
	var qs []domain.QuotaEntry
	q, err := bob.Quotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	qs = q
	for _, q := range qs {
		if q.Template == "dozer" && (q.Running != 0 || q.Paused == nil || *q.Paused != 1) {
			t.Fatalf("quota while paused: %+v", q)
		}
	}

	// Paused, it accrues no seconds; its checkpoint's bytes are reported.
	rep, err := bob.Usage(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Paused) != 1 || rep.Paused[0].Template != "dozer" || rep.Paused[0].Environments != 1 || rep.Paused[0].Bytes <= 0 {
		t.Fatalf("usage while paused: %+v", rep.Paused)
	}

	// An exec wakes it: the command runs once it is restored, and finds
	// the file.
	if out := u.ok("exec", id, "--", "cat", "note.txt"); strings.TrimSpace(out) != "kept" {
		t.Fatalf("exec after the wake: %q", out)
	}
	woken, err := bob.GetEnvironment(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if woken.State != domain.StateReady || woken.Resumed == nil || woken.Restored == nil || woken.Restored.Key != paused.Snapshot {
		t.Fatalf("woken: %+v restored %+v", woken, woken.Restored)
	}

	// A port-forward held open across a pause: the next connection wakes
	// it and is served from the restored folder.
	pf := u.start("port-forward", id, "-o", "json")
	var fwd struct {
		Exports []domain.EnvExport `json:"exports"`
	}
	if err := json.NewDecoder(pf.stdout).Decode(&fwd); err != nil || len(fwd.Exports) != 1 {
		t.Fatalf("port-forward: %v %+v\n%s", err, fwd, pf.stderr.String())
	}
	untilPaused(t, s, bob, id)
	hc := &http.Client{Timeout: 2 * time.Minute} // a hang guard
	res, err := hc.Get("http://" + fwd.Exports[0].Listen + "/note.txt")
	if err != nil {
		t.Fatalf("GET through the tunnel of a paused environment: %v\n%s", err, pf.stderr.String())
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || strings.TrimSpace(string(body)) != "kept" {
		t.Fatalf("through the tunnel: %d %q\n%s", res.StatusCode, body, pf.stderr.String())
	}
	contains(t, "port-forward", pf.stderr.String(), "is paused (idle); the next connection wakes it")
	pf.interrupt(t)

	// wake, explicitly.
	untilPaused(t, s, bob, id)
	var e domain.Environment
	u.json(&e, "wake", id, "--wait")
	if e.State != domain.StateReady {
		t.Fatalf("wake --wait: %+v", e)
	}

	// Past its retention a paused environment is deleted, with its
	// checkpoint, saying why.
	var brief client.Leased
	u.json(&brief, "lease", "--template", "brief", "--wait", "--no-sandbox")
	bp := untilPaused(t, s, bob, brief.Environment.ID)
	time.Sleep(3 * time.Second)
	if _, err := timeouts.Run(ctx, s.Store, clock.System{}, timeouts.Options{}); err != nil {
		t.Fatal(err)
	}
	gone, err := bob.GetEnvironment(ctx, brief.Environment.ID)
	if err != nil || gone.State != domain.StateStopped || gone.StopReason != "retention" {
		t.Fatalf("past its retention: %+v %v", gone, err)
	}
	if a, err := bob.GetArtifact(ctx, bp.Snapshot); err == nil && a.State == domain.ArtifactSealed {
		t.Fatalf("its checkpoint outlived it: %+v", a)
	}
	contains(t, "ls --all", u.ok("ls", "--all"), brief.Environment.ID, "stopped")
	contains(t, "get", u.ok("get", brief.Environment.ID), "(retention)")
}
