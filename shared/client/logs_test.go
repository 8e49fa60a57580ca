package client_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// tickerTemplate prints a line every tenth of a second for a few seconds,
// then fails.
var tickerTemplate = domain.Template{
	Name: "ticker", Runtime: "process",
	Command:  []string{"sh", "-c", `i=0; while [ $i -lt 30 ]; do echo "tick $i"; i=$((i+1)); sleep 0.1; done; echo "out of ticks" >&2; exit 4`},
	Timeouts: domain.Timeouts{Idle: domain.Duration(time.Hour), Hard: domain.Duration(time.Hour)},
	Quota:    domain.Quota{MaxLeases: 2},
}

// ReadLogs follows a running environment's log from its node until it
// ends, then reads the log its node kept (an artifact, through a signed
// link); another organization's environment is not found.
func TestReadLogsFollowsThenReadsTheKeptLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a hang guard
	defer cancel()
	c, err := client.New(os.Getenv("ENVLEASE_URL"), os.Getenv("ENVLEASE_TOKEN"))
	if err != nil {
		t.Fatal(err)
	}
	leased, err := c.Lease(ctx, client.LeaseRequest{Template: "ticker"})
	if err != nil {
		t.Fatal(err)
	}
	id := leased.Environment.ID
	waitState := func(want domain.State) domain.Environment {
		t.Helper()
		for {
			e, err := c.GetEnvironment(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if e.State == want {
				return e
			}
			if ctx.Err() != nil {
				t.Fatalf("%s is %s, want %s", id, e.State, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitState(domain.StateReady)

	var live bytes.Buffer
	l, err := c.ReadLogs(ctx, id, client.LogOptions{Follow: true}, &live)
	if err != nil || l.Live == nil {
		t.Fatalf("follow: %+v %v", l, err)
	}
	for _, want := range []string{"] started", "tick 0\n", "tick 29\n", "out of ticks\n", "] failed: process exited with status 4"} {
		if !strings.Contains(live.String(), want) {
			t.Fatalf("the followed log lacks %q:\n%s", want, live.String())
		}
	}

	failed := waitState(domain.StateFailed)
	var kept bytes.Buffer
	for failed.Log == "" && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		failed = waitState(domain.StateFailed)
	}
	l, err = c.ReadLogs(ctx, id, client.LogOptions{}, &kept)
	if err != nil || l.Kept == nil || l.Kept.Artifact != failed.Log || int64(kept.Len()) != l.Kept.Size {
		t.Fatalf("kept: %+v %v", l, err)
	}
	if !strings.Contains(kept.String(), "tick 0\n") || !strings.Contains(kept.String(), "tick 29\n") || !strings.Contains(kept.String(), "exited with status 4") {
		t.Fatalf("the kept log:\n%s", kept.String())
	}

	carol, err := client.New(os.Getenv("ENVLEASE_URL"), clienttest.CarolToken)
	if err != nil {
		t.Fatal(err)
	}
	_, err = carol.EnvironmentLogs(ctx, id)
	if e, ok := client.AsError(err); !ok || e.Status != http.StatusNotFound {
		t.Fatalf("another organization's log: %v", err)
	}
}
