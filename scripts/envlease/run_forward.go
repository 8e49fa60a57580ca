package main

import (
	"context"
	"sync/atomic"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

// readyAPI is the client as `run` hands it to tunnel.Forward: Forward's
// first read of the environment is answered with the ready record the wait
// for ready just returned, which saves a request on the way to the command;
// later reads (after a dropped tunnel) go to the service.
type readyAPI struct {
	*client.Client
	env  domain.Environment
	used atomic.Bool
}

func (r *readyAPI) GetEnvironment(ctx context.Context, id string) (domain.Environment, error) {
	if id == r.env.ID && r.env.State == domain.StateReady && r.used.CompareAndSwap(false, true) {
		return r.env, nil
	}
	return r.Client.GetEnvironment(ctx, id)
}

func (r *readyAPI) CreateTunnel(ctx context.Context, id string) (client.TunnelTicket, error) {
	t, err := r.Client.CreateTunnel(ctx, id)
	markStep("ticket")
	return t, err
}
