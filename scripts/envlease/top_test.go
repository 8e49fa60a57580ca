package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// hogTemplate holds 96 MiB (written, so resident) and sleeps.
var hogTemplate = domain.Template{
	Name: "hog", Runtime: "process",
	Command:  []string{"python3", "-c", "import time\nb = b'\\x01' * (96 << 20)\ntime.sleep(3600)"},
	Timeouts: domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(time.Hour)},
	Quota:    domain.Quota{MaxLeases: 2},
}

// quitterTemplate is ready at once (no export) and its command exits 3.
var quitterTemplate = domain.Template{
	Name: "quitter", Runtime: "process", Command: []string{"sh", "-c", "sleep 2; exit 3"},
	Timeouts: domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(time.Hour)},
	Quota:    domain.Quota{MaxLeases: 2},
}

// A process that holds 96 MiB shows about 96 MiB in top, live and in the
// history kept once it ended; and why each environment ended reaches the
// CLI (ls --all, get) and the events: deleted, exited.
func TestTopAndWhyItEnded(t *testing.T) {
	s := clienttest.Start(t, clienttest.WithTemplates("acme", hogTemplate, quitterTemplate))
	u := newUser(t, s)
	u.login(clienttest.BobToken)

	var leased struct {
		Environment domain.Environment `json:"environment"`
	}
	u.json(&leased, "lease", "--template", "hog", "--wait")
	hog := leased.Environment.ID
	u.json(&leased, "lease", "--template", "quitter", "--wait")
	quitter := leased.Environment.ID

	// The node samples every 5 s: wait for a sample that holds the bytes.
	var x domain.MetricSample
	for deadline := time.Now().Add(2 * time.Minute); ; {
		out := u.ok("top", hog, "--once", "-o", "json")
		if strings.TrimSpace(out) != "" {
			if err := json.Unmarshal([]byte(out), &x); err != nil {
				t.Fatalf("top --once -o json: %v\n%s", err, out)
			}
			if x.Memory >= 90<<20 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sample of %s holds 96 MiB: last %+v", hog, x)
		}
		time.Sleep(time.Second)
	}
	if x.Memory > 160<<20 || x.Processes < 1 || x.CPU < 0 {
		t.Fatalf("sample of a process holding 96 MiB: %+v", x)
	}
	t.Logf("live sample: %+v", x)
	contains(t, "top --once", u.ok("top", hog, "--once"), "CPU%", "MEMORY", "MiB")

	contains(t, "rm", u.ok("rm", hog), hog)
	// Its history is kept with it once its node reported the end.
	var hist []domain.MetricSample
	for deadline := time.Now().Add(time.Minute); ; {
		hist = hist[:0]
		dec := json.NewDecoder(strings.NewReader(u.ok("top", hog, "-o", "json")))
		for dec.More() {
			var y domain.MetricSample
			if err := dec.Decode(&y); err != nil {
				t.Fatal(err)
			}
			hist = append(hist, y)
		}
		if len(hist) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	peak := int64(0)
	for _, y := range hist {
		peak = max(peak, y.Memory)
	}
	if len(hist) == 0 || peak < 90<<20 || peak > 160<<20 {
		t.Fatalf("kept history of %s: %d points, peak memory %d", hog, len(hist), peak)
	}

	// The quitter's command exits 3 on its own: failed, exited.
	var got domain.Environment
	for deadline := time.Now().Add(time.Minute); ; {
		u.json(&got, "get", quitter)
		if !got.State.Live() || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if got.State != domain.StateFailed || got.StopReason != domain.StopExited {
		t.Fatalf("quitter: %s (%s) %s", got.State, got.StopReason, got.Error)
	}
	ls := u.ok("ls", "--all")
	contains(t, "ls --all", ls, "REASON", "deleted", "exited")
	contains(t, "get", u.ok("get", quitter), "(exited)")
	contains(t, "events", u.ok("events", "--type", "environment.failed"), "reason=exited")
	contains(t, "events", u.ok("events", "--type", "environment.stopped"), "reason=deleted")
}
