package main

import (
	"context"

	"github.com/spf13/cobra"
)

func (a *app) rmCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"delete"},
		Short:   "Delete an environment, releasing its quota at once",
		Long: `Delete an environment. The quota is released at once; a pending environment
becomes stopped, one a node runs becomes stopping while the node tears it
down. Deleting an environment that has already ended changes nothing.`,
		Args:              args(1),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			e, err := s.client.DeleteEnvironment(ctx, got[0])
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(e)
			}
			t := newTable(a.stdout, "ID", "NAME", "TEMPLATE", "STATE")
			t.row(e.ID, e.Name, e.Template, string(e.State))
			return t.flush()
		}),
	}
}
