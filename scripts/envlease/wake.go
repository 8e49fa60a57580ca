package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

// WakeEnvironment is in the client (shared/client/api.go); wake and resume
// ENV are its commands. See docs/environments.md, "Pause on idle, wake on use".

func (a *app) wakeCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "wake ENV [--wait]",
		Short: "Wake a paused environment",
		Long: `Wake an environment that was paused when it went idle: it is pending again,
restored from its checkpoint on a node of its pool (every file verified), and its
template's command starts as on a fresh start; files are kept, processes and
memory are not. --wait waits until it is ready. An exec, a tunnel, a preview
link or a touch wakes it too. 'envlease resume ENV' is the same.`,
		Args:              args(1),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			return a.wake(ctx, got[0], wait)
		}),
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the environment is ready")
	cmd.Flags().BoolVarP(&a.quiet, "quiet", "q", false, "print only the environment's id")
	return cmd
}

func (a *app) wake(ctx context.Context, id string, wait bool) error {
	s, err := a.session()
	if err != nil {
		return err
	}
	e, err := wakeEnvironment(ctx, s.client, id)
	if err != nil {
		return err
	}
	if wait {
		if e, err = a.waitReady(ctx, s.client, e, nil); err != nil {
			return err
		}
	}
	return a.printEnvironment(e)
}

// wakeEnvironment wakes id, asking again while its node still lets it go
// (503 waking; the client retries it up to client.MaxWake).
func wakeEnvironment(ctx context.Context, c *client.Client, id string) (domain.Environment, error) {
	return c.WakeEnvironment(ctx, id)
}

// isEnvironmentID tells an environment's id from an artifact's for resume.
func isEnvironmentID(id string) bool { return strings.HasPrefix(id, "env_") }
