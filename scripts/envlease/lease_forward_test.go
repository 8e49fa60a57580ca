package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// lease --forward holds the exports open on this machine until Ctrl-C,
// which ends the forwarding and leaves the environment running; lease, get
// and ls say how to reach an export that nothing forwards.
func TestLeaseForwardAndHowToReach(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	u.ok("sandbox", "register", "--name", "laptop")

	lf := u.start("lease", "--template", "shell", "--forward", "-o", "json")
	var leased client.Leased
	dec := json.NewDecoder(lf.stdout)
	if err := dec.Decode(&leased); err != nil {
		<-lf.done
		t.Fatalf("lease --forward -o json: %v\nstderr: %s", err, lf.stderr.String())
	}
	env := leased.Environment
	lf.waitFor(t, "Forwarding; press Ctrl-C to stop.")
	res, err := (&http.Client{Timeout: time.Minute}).Get("http://" + env.Exports[0].Listen + "/")
	if err != nil {
		t.Fatalf("GET through lease --forward: %v\n%s", err, lf.stderr.String())
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "Directory listing") {
		t.Fatalf("through lease --forward: %d %q", res.StatusCode, body)
	}
	if code := lf.interrupt(t); code != 0 {
		t.Fatalf("lease --forward after Ctrl-C: exit %d\n%s", code, lf.stderr.String())
	}
	contains(t, "lease --forward's stderr", lf.stderr.String(), "Stopped forwarding; "+env.ID+" runs on")
	// -o json prints one object, as every command does.
	if rest, _ := io.ReadAll(io.MultiReader(dec.Buffered(), lf.stdout)); strings.TrimSpace(string(rest)) != "" {
		t.Fatalf("lease --forward -o json printed more than one object; after the first: %q", rest)
	}
	var got domain.Environment
	u.json(&got, "get", env.ID)
	if got.State != domain.StateReady {
		t.Fatalf("after lease --forward: %s", got.State)
	}

	// Nothing forwards it now: get and ls say how to reach it.
	for _, args := range [][]string{{"get", env.ID}, {"ls"}} {
		r := u.run("", args...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d: %s", args, r.code, r.stderr)
		}
		contains(t, strings.Join(args, " ")+"'s stderr", r.stderr, "envlease port-forward", "--forward")
	}
	// -q prints the id alone, for a script to keep.
	if out := u.ok("get", env.ID, "-q"); out != env.ID+"\n" {
		t.Fatalf("get -q: %q", out)
	}
}
