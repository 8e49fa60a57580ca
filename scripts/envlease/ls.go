package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

// listStates are what --state takes: live (the default) or one state.
var listStates = []string{"live", "pending", "starting", "ready", "stopping", "stopped", "failed", "paused"}

func (a *app) lsCommand() *cobra.Command {
	var (
		state string
		all   bool
		limit int
	)
	cmd := &cobra.Command{
		Use:     "ls [--state S] [--all]",
		Aliases: []string{"list"},
		Short:   "List environments, newest first",
		Long: `List your organization's environments, newest first: the live ones (pending,
starting, ready) and the paused ones by default, those in one state with
--state, or those in every state with --all. At most --limit are shown (0: all
of them). A paused environment's IDLE UNTIL says until when it is kept; an
exec, a tunnel, a touch or 'envlease wake' wakes it.`,
		Example: `  envlease ls
  envlease ls --state stopped --limit 10
  envlease ls --all -o json | jq -r '.environments[].id'`,
		Args: args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			if !slices.Contains(listStates, state) {
				return usagef("--state %q: want one of %s", state, strings.Join(listStates, ", "))
			}
			if all && cmd.Flags().Changed("state") {
				return usagef("--all and --state cannot be used together")
			}
			if limit < 0 {
				return usagef("--limit must be 0 (no limit) or more")
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			states := []string{state}
			switch {
			case all:
				// Live, then every state after it: together, every state.
				states = []string{"live", "stopping", "stopped", "failed", "paused"}
			case !cmd.Flags().Changed("state"):
				// Paused ones are still yours to use: listed with the live.
				states = []string{"live", "paused"}
			}
			var envs []domain.Environment
			for _, st := range states {
				got, err := listEnvironments(ctx, s.client, st, limit)
				if err != nil {
					return err
				}
				envs = append(envs, got...)
			}
			slices.SortStableFunc(envs, func(x, y domain.Environment) int { return y.Created.Compare(x.Created) })
			if limit > 0 && len(envs) > limit {
				envs = envs[:limit]
			}
			if a.json() {
				return a.printJSON(map[string]any{"environments": envs})
			}
			now := time.Now()
			// A listing that may hold ended environments says why each
			// ended (domain.StopReasons).
			ended := all || (state != "live" && !domain.State(state).Live())
			cols := []string{"ID", "NAME", "TEMPLATE", "STATE", "CREATED", "IDLE UNTIL", "EXPORTS"}
			if ended {
				cols = []string{"ID", "NAME", "TEMPLATE", "STATE", "REASON", "CREATED", "IDLE UNTIL", "EXPORTS"}
			}
			t := newTable(a.stdout, cols...)
			for _, e := range envs {
				idle := "-"
				if e.State.Live() {
					idle = ago(e.IdleUntil, now)
				}
				if e.State == domain.StatePaused && e.RetainUntil != nil {
					idle = "kept until " + ago(*e.RetainUntil, now)
				}
				if ended {
					t.row(e.ID, e.Name, e.Template, string(e.State), orDash(e.StopReason), ago(e.Created, now), idle, orDash(exports(e.Exports)))
					continue
				}
				t.row(e.ID, e.Name, e.Template, string(e.State), ago(e.Created, now), idle, orDash(exports(e.Exports)))
			}
			if err := t.flush(); err != nil {
				return err
			}
			a.sayHowToReach(envs)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&state, "state", "s", "live", "live, or one state: "+strings.Join(listStates[1:], ", "))
	f.BoolVarP(&all, "all", "a", false, "environments in every state")
	f.IntVar(&limit, "limit", 50, "show at most this many (0: all)")
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(listStates, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// listEnvironments follows the pages of one listing until limit
// environments (0: all) are read.
func listEnvironments(ctx context.Context, c *client.Client, state string, limit int) ([]domain.Environment, error) {
	var out []domain.Environment
	q := client.EnvironmentQuery{State: state, Limit: 200}
	for {
		if limit > 0 {
			q.Limit = min(200, limit-len(out))
		}
		page, err := c.ListEnvironments(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Environments...)
		if page.Next == "" || (limit > 0 && len(out) >= limit) {
			return out, nil
		}
		q.Cursor = page.Next
	}
}
