package clienttest

import (
	"context"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/timeouts"
)

// UntilPaused runs the timeout job until environment id, past its idle
// timeout with nothing using it, is paused and its node has let it go, as
// c reads it; it fails the test if the environment ends otherwise or is not
// paused within wait.
func (s *Stack) UntilPaused(t testing.TB, c *client.Client, id string, wait time.Duration) domain.Environment {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(wait)
	for {
		if _, err := timeouts.Run(ctx, s.Store, clock.System{}, timeouts.Options{}); err != nil {
			t.Fatal(err)
		}
		e, err := c.GetEnvironment(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if e.State == domain.StatePaused && e.Node == "" {
			return e
		}
		if e.State != domain.StateReady && e.State != domain.StatePaused {
			t.Fatalf("%s went %s (%s, %s) instead of paused", id, e.State, e.StopReason, e.Error)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never paused: %+v", id, e)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
