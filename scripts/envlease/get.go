package main

import (
	"context"

	"github.com/spf13/cobra"
)

func (a *app) getCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "get ID",
		Short:             "Show an environment, in any state",
		Args:              args(1),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			e, err := s.client.GetEnvironment(ctx, got[0])
			if err != nil {
				return err
			}
			return a.printEnvironment(e)
		}),
	}
	cmd.Flags().BoolVarP(&a.quiet, "quiet", "q", false, "print only the environment's id")
	return cmd
}
