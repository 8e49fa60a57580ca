package main

import (
	"context"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

func (a *app) templatesCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "templates",
		Aliases: []string{"template"},
		Short:   "List the templates your organization can lease",
		Args:    args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			list, err := s.client.Templates(ctx)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(list)
			}
			t := newTable(a.stdout, "NAME", "POOLS", "IDLE", "HARD", "MAX", "EXPORTS", "SHARES", "DESCRIPTION")
			for _, tp := range list.Templates {
				var ex []string
				for name, e := range tp.Exports {
					ex = append(ex, name+":"+strconv.Itoa(e.Port))
				}
				sort.Strings(ex)
				// A share as --share takes it: NAME, then where it lands.
				var sh []string
				for _, s := range tp.Shares {
					sh = append(sh, s.Name+"="+s.Path)
				}
				t.row(tp.Name, strings.Join(tp.Pools, ","), tp.Timeouts.Idle.String(), tp.Timeouts.Hard.String(),
					strconv.Itoa(tp.Quota.MaxLeases), orDash(strings.Join(ex, ",")), orDash(strings.Join(sh, ",")), tp.Description)
			}
			return t.flush()
		}),
	}
}
