package main

import (
	"context"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
)

// The jobs run on the -sweep ticker against the stack's store and bucket,
// and stopping them waits for the loop to end. The ticker is real time (it
// is what is being tested); the deadlines are the fake clock's.
func TestJobsRunEverySweepAndStop(t *testing.T) {
	e := apitest.New(t, nil)
	s3s := devstack.NewTestS3(t)
	ctx := context.Background()
	bob := domain.Principal{OrgID: "acme", UserID: "bob", Role: domain.RoleMember}
	_, err := environments.NewService(e.Store, e.Clock).Lease(ctx, bob, environments.LeaseRequest{Template: "sleeper"}, "")
	if err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(10 * time.Minute) // sleeper's idle timeout

	d := deps{ctx: ctx, store: e.Store, clock: e.Clock, log: apitest.DiscardLogger(), s3: s3s.Client(ctx), bucket: s3s.Bucket, sweep: 20 * time.Millisecond}
	stop := startJobs(d)
	deadline := time.Now().Add(time.Minute)
	for {
		page, err := e.Store.ListEnvironments(ctx, "acme", domain.EnvQuery{State: "stopped", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Environments) == 1 && page.Environments[0].StopReason == "idle" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the timeout job did not stop the idle environment within a minute of 20 ms sweeps")
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("stopping the jobs did not return")
	}
}
