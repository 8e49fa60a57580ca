package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"
)

func (a *app) touchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "touch ID",
		Short: "Move an environment's idle deadline forward",
		Long: `Move the environment's idle deadline to now plus its idle timeout (never past
its hard expiry). An environment that has ended is gone: exit code 4.`,
		Args:              args(1),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			e, err := s.client.TouchEnvironment(ctx, got[0])
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(e)
			}
			now := time.Now()
			t := newTable(a.stdout, "ID", "NAME", "STATE", "IDLE UNTIL", "EXPIRES")
			t.row(e.ID, e.Name, string(e.State), e.IdleUntil.Local().Format(time.TimeOnly)+" ("+ago(e.IdleUntil, now)+")", ago(e.Expires, now))
			return t.flush()
		}),
	}
}
