package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/tunnel"
)

func (a *app) portForwardCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "port-forward ID",
		Short: "Carry connections to an environment's exports through its node",
		Long: `Listen on each export's listen address (the address its lease gave it on this
sandbox) and carry every connection made there to the export's target, through a
tunnel to the node that runs the environment. The environment must be ready, and
leased with this machine as its sandbox, so its exports have listen addresses.

Each forward is shown on standard error as LISTEN -> SERVICE (TARGET). With -o json
the exports are printed on standard output as one JSON object once every listener is
open and the tunnel is up. The tunnel's ticket is renewed before it ends, and a tunnel
that drops is redialled while the listeners stay open. It runs until Ctrl-C (exit code
130) or until the environment ends (exit code 1, saying why).`,
		Example:           "  envlease port-forward env_19cec2a0e00p4k7w1m9z3c5b\n  curl http://127.0.0.1:24817/",
		Args:              args(1),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			env := got[0]
			return tunnel.Forward(ctx, s.client, env, a.forwardEvent(env, func(exports []domain.EnvExport) error {
				return a.printJSON(forwardedJSON{Environment: env, Exports: exports})
			}), tunnel.Options{})
		}),
	}
	c.GroupID = "env"
	return c
}

// forwardedJSON is what -o json prints once forwarding.
type forwardedJSON struct {
	Environment string             `json:"environment"`
	Exports     []domain.EnvExport `json:"exports"`
}

// forwardEvent tells people what the tunnel does, on standard error, and
// scripts what is forwarded, on standard output: with -o json, asJSON prints
// the one object of the command once every listener is open.
func (a *app) forwardEvent(env string, asJSON func(exports []domain.EnvExport) error) func(tunnel.Event) {
	started := false // Forward calls this one event at a time
	return func(e tunnel.Event) {
		switch e.Kind {
		case tunnel.Listening:
			a.say("%s -> %s (%s)", e.Listen, e.Service, e.Target)
		case tunnel.Forwarding:
			started = true
			if a.json() {
				_ = asJSON(e.Exports)
			}
			a.say("Forwarding; press Ctrl-C to stop.")
		case tunnel.Retrying:
			if e.Wait > 0 {
				a.say("tunnel: %v; trying again in %s", e.Err, e.Wait.Round(time.Millisecond))
			} else {
				a.say("tunnel: %v; redialling", e.Err)
			}
		case tunnel.Connected:
			if started { // the first tunnel is announced by Forwarding
				a.say("tunnel: connected again")
			}
		case tunnel.StreamFailed:
			a.say("%s: a connection to %s was not forwarded: %v", e.Listen, e.Service, e.Err)
		case tunnel.Paused:
			a.say("tunnel: %s is paused (idle); the next connection wakes it", env)
		}
	}
}
