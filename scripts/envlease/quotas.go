package main

import (
	"context"
	"strconv"

	"github.com/spf13/cobra"
)

func (a *app) quotasCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "quotas",
		Aliases: []string{"quota"},
		Short:   "Show each template's limit of live environments and how many run",
		Args:    args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			qs, err := s.client.Quotas(ctx)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(map[string]any{"quotas": qs})
			}
			t := newTable(a.stdout, "TEMPLATE", "RUNNING", "MAX", "IDLE", "HARD")
			for _, q := range qs {
				t.row(q.Template, strconv.Itoa(q.Running), strconv.Itoa(q.MaxLeases), q.Idle.String(), q.Hard.String())
			}
			return t.flush()
		}),
	}
}
