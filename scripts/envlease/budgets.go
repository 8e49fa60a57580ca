package main

import (
	"context"
	"encoding/csv"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/usage"
)

func (a *app) budgetsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "budgets",
		Aliases: []string{"budget"},
		Short:   "Show and set budgets of environment time or cost (setting: admins)",
		Long: `A budget caps the seconds or the cost of environment time of the organization,
a project, a person or a label value per UTC day or month. While it is spent,
leases in its scope are refused (exit code 5, like a full quota); a hard budget
also stops the scope's live environments at the next timeout run. Budgets on a
project, person or label need that grouping in the usage settings
(envlease budgets group).`,
	}
	cmd.AddCommand(a.budgetsListCommand(), a.budgetsSetCommand(), a.budgetsRmCommand(), a.budgetsGroupCommand())
	return cmd
}

func (a *app) budgetsListCommand() *cobra.Command {
	return &cobra.Command{
		Use:         "ls",
		Aliases:     []string{"list"},
		Short:       "List budgets with what their period has spent and has left",
		Annotations: map[string]string{csvAnnotation: "yes"},
		Args:        args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			list, err := s.client.Budgets(ctx)
			if err != nil {
				return err
			}
			switch {
			case a.json():
				return a.printJSON(list)
			case a.output == "csv":
				cw := csv.NewWriter(a.stdout)
				_ = cw.Write([]string{"id", "scope", "period", "limit", "unit", "spent", "remaining", "hard", "exhausted"})
				for _, b := range list.Budgets {
					_ = cw.Write([]string{b.ID, b.Scope, b.Period, num(b.Limit()), b.Unit, num(b.Spent), num(b.Remaining),
						strconv.FormatBool(b.Hard), strconv.FormatBool(b.Exhausted)})
				}
				cw.Flush()
				return cw.Error()
			}
			if len(list.Budgets) == 0 {
				a.say("No budgets.")
				return nil
			}
			t := newTable(a.stdout, "ID", "SCOPE", "PERIOD", "LIMIT", "SPENT", "LEFT", "HARD", "STATE")
			for _, b := range list.Budgets {
				state := "ok"
				if b.Exhausted {
					state = "spent: leases refused"
				}
				t.row(b.ID, b.Scope, b.Period+" from "+b.PeriodStart, amount(b.Limit(), b.Unit), amount(b.Spent, b.Unit),
					amount(b.Remaining, b.Unit), strconv.FormatBool(b.Hard), state)
			}
			return t.flush()
		}),
	}
}

func (a *app) budgetsSetCommand() *cobra.Command {
	var b usage.Budget
	var limit string
	cmd := &cobra.Command{
		Use:   "set ID --scope SCOPE --period day|month --limit 10h|COST [--hard]",
		Short: "Create or change a budget (admins)",
		Long: `--scope is org, project=NAME, user=ID or label:KEY=VALUE. --limit is a
duration of environment time (10h, 90m) or a number, a cost in the
organization's currency (needs template rates).`,
		Example: `  envlease budgets set payments --scope label:team=payments --period month --limit 500
  envlease budgets set ci-daily --scope project=ci --period day --limit 40h --hard`,
		Args: args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			b.ID = got[0]
			if d, err := parseLimitDuration(limit); err == nil {
				b.Seconds = d
			} else if c, err := strconv.ParseFloat(limit, 64); err == nil && c > 0 {
				b.Cost = c
			} else {
				return usagef("--limit %q: want a duration such as 10h or a cost such as 500", limit)
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			st, err := s.client.PutBudget(ctx, b)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(st)
			}
			a.say("Budget %s: %s of %s spent this %s, %s left.", st.ID, amount(st.Spent, st.Unit), amount(st.Limit(), st.Unit), st.Period, amount(st.Remaining, st.Unit))
			return nil
		}),
	}
	cmd.Flags().StringVar(&b.Scope, "scope", "org", "org, project=NAME, user=ID or label:KEY=VALUE")
	cmd.Flags().StringVar(&b.Period, "period", "month", "day or month (UTC)")
	cmd.Flags().StringVar(&limit, "limit", "", "a duration (10h) or a cost (500)")
	cmd.Flags().BoolVar(&b.Hard, "hard", false, "also stop the scope's live environments when spent")
	return cmd
}

func (a *app) budgetsRmCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"delete"},
		Short:   "Remove a budget (admins)",
		Args:    args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			if err := s.client.DeleteBudget(ctx, got[0]); err != nil {
				return err
			}
			a.say("Removed budget %s.", got[0])
			return nil
		}),
	}
}

func (a *app) budgetsGroupCommand() *cobra.Command {
	var groupings []string
	var currency string
	var rates []string
	cmd := &cobra.Command{
		Use:   "group [--by GROUPING]... [--currency EUR] [--rate TEMPLATE=PERHOUR@FROM]...",
		Short: "Show or change the usage settings: groupings, currency, template rates (admins)",
		Long: `Without flags, shows the usage settings. With flags, replaces the flags given:
--by lists every grouping to record (project, user, label:KEY; at most 8; each
adds one write per stop), --rate adds a template's rate per hour from a UTC day.`,
		Example: `  envlease budgets group --by project --by user --by label:team
  envlease budgets group --currency EUR --rate shell=0.12@2026-11-01`,
		Args: args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			set, err := s.client.UsageSettings(ctx)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("by") || cmd.Flags().Changed("currency") || len(rates) > 0 {
				if cmd.Flags().Changed("by") {
					set.Groupings = groupings
				}
				if cmd.Flags().Changed("currency") {
					set.Currency = currency
				}
				for _, r := range rates {
					tpl, rest, ok1 := strings.Cut(r, "=")
					per, from, ok2 := strings.Cut(rest, "@")
					v, err := strconv.ParseFloat(per, 64)
					if !ok1 || !ok2 || err != nil {
						return usagef("--rate %q: want TEMPLATE=PERHOUR@YYYY-MM-DD", r)
					}
					set.Rates[tpl] = append(set.Rates[tpl], usage.Rate{From: from, PerHour: v})
				}
				if set, err = s.client.PutUsageSettings(ctx, set); err != nil {
					return err
				}
			}
			if a.json() {
				return a.printJSON(set)
			}
			t := newTable(a.stdout, "SETTING", "VALUE")
			t.row("groupings", strings.Join(append([]string{"template"}, set.Groupings...), ", "))
			t.row("currency", set.Currency)
			for tpl, rs := range set.Rates {
				for _, r := range rs {
					t.row("rate "+tpl, num(r.PerHour)+"/h from "+r.From)
				}
			}
			return t.flush()
		}),
	}
	cmd.Flags().StringArrayVar(&groupings, "by", nil, "a grouping to record: project, user or label:KEY; repeatable")
	cmd.Flags().StringVar(&currency, "currency", "", "ISO 4217 currency of rates and costs")
	cmd.Flags().StringArrayVar(&rates, "rate", nil, "TEMPLATE=PERHOUR@YYYY-MM-DD; repeatable")
	return cmd
}

// parseLimitDuration reads a budget limit given as a duration, in seconds.
func parseLimitDuration(v string) (int64, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, usagef("not a duration")
	}
	return int64(d.Seconds()), nil
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// amount shows seconds as a duration and a cost with its currency.
func amount(v float64, unit string) string {
	if unit == "seconds" {
		return seconds(int64(v))
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + " " + unit
}
