package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
)

// csvAnnotation marks the commands that take -o csv.
const csvAnnotation = "envlease/csv"

func (a *app) usageCommand() *cobra.Command {
	var since, until, by, filter string
	cmd := &cobra.Command{
		Use:   "usage [--since DATE] [--until DATE] [--by GROUPING] [--filter DIM=VALUE]",
		Short: "Show environment time (and cost) per template, project, person or label per day",
		Long: `Show the seconds of environment time per UTC day, from --since through --until
(default today), per template or grouped by --by: project, user (who leased)
or label:KEY (a label the organization groups usage by; see the usage
settings). --filter DIM=VALUE keeps one value of the grouping, of template,
or (grouped by template) of any recorded grouping. When the organization set
template rates, each row also shows the cost.

--since and --until are UTC days (2026-03-01) or a number of days back (7d);
the default --since is the service's, 30 days back. -o csv writes
day,group,seconds,cost rows.`,
		Example: `  envlease usage
  envlease usage --since 7d
  envlease usage --by label:team --since 2026-11-01
  envlease usage --by project --filter template=shell -o csv
  envlease usage --since 2026-03-01 -o json`,
		Annotations: map[string]string{csvAnnotation: "yes"},
		Args:        args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			now := time.Now()
			from, err := parseSince(since, now)
			if err != nil {
				return err
			}
			to, err := parseSince(until, now)
			if err != nil {
				return usagef("--until %q: want YYYY-MM-DD or a number of days such as 7d", until)
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			report, err := s.client.UsageBy(ctx, client.UsageQuery{Since: from, Until: to, By: by, Filter: filter})
			if err != nil {
				return err
			}
			switch {
			case a.json():
				return a.printJSON(report)
			case a.output == "csv":
				return usageCSV(a.stdout, report)
			}
			if len(report.Usage) == 0 {
				a.say("No environment time since %s.", report.Since.UTC().Format(time.DateOnly))
				return nil
			}
			group := "TEMPLATE"
			if report.By != "" {
				group = strings.ToUpper(report.By)
			}
			head := []string{"DAY", group, "TIME", "SECONDS"}
			if report.Currency != "" {
				head = append(head, "COST ("+report.Currency+")")
			}
			t := newTable(a.stdout, head...)
			for _, u := range report.Usage {
				row := []string{u.Day, groupName(u), seconds(u.Seconds), strconv.FormatInt(u.Seconds, 10)}
				if report.Currency != "" {
					row = append(row, costString(u.Cost))
				}
				t.row(row...)
			}
			if err := t.flush(); err != nil {
				return err
			}
			if report.GroupedSince != "" && report.GroupedSince > report.Since.UTC().Format(time.DateOnly) {
				a.say("Grouped by %s from %s only: earlier days are not in this grouping.", report.By, report.GroupedSince)
			}
			fmt.Fprintln(a.stdout)
			usageChart(a.stdout, report.Usage, 40)
			return nil
		}),
	}
	cmd.Flags().StringVar(&since, "since", "", "first UTC day: YYYY-MM-DD, or Nd for N days back (default: 30 days back)")
	cmd.Flags().StringVar(&until, "until", "", "last UTC day: YYYY-MM-DD, or Nd for N days back (default: today)")
	cmd.Flags().StringVar(&by, "by", "", "group by template, project, user or label:KEY (default: template)")
	cmd.Flags().StringVar(&filter, "filter", "", "keep one value: DIM=VALUE, e.g. project=web or label:team=payments")
	return cmd
}

// groupName is a row's group: its value when grouped, else its template;
// the group without a value shows as (none).
func groupName(u client.UsageEntry) string {
	if u.Value == nil {
		return u.Template
	}
	if *u.Value == "" {
		return "(none)"
	}
	return *u.Value
}

func costString(c *float64) string {
	if c == nil {
		return ""
	}
	return strconv.FormatFloat(*c, 'f', 2, 64)
}

// usageCSV writes the report as CSV: day, group, seconds, cost (empty
// without rates), and a header naming the grouping.
func usageCSV(w io.Writer, r client.UsageReport) error {
	cw := csv.NewWriter(w)
	group := "template"
	if r.By != "" {
		group = r.By
	}
	_ = cw.Write([]string{"day", group, "seconds", "cost"})
	for _, u := range r.Usage {
		cost := ""
		if u.Cost != nil {
			cost = strconv.FormatFloat(*u.Cost, 'f', -1, 64)
		}
		v := u.Template
		if u.Value != nil {
			v = *u.Value
		}
		_ = cw.Write([]string{u.Day, v, strconv.FormatInt(u.Seconds, 10), cost})
	}
	cw.Flush()
	return cw.Error()
}

// parseSince reads --since: empty (the service's default), YYYY-MM-DD, or
// Nd days before today (UTC).
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 {
			return time.Time{}, usagef("--since %q: want YYYY-MM-DD or a number of days such as 7d", v)
		}
		return now.UTC().AddDate(0, 0, -days), nil
	}
	t, err := time.Parse(time.DateOnly, v)
	if err != nil {
		return time.Time{}, usagef("--since %q: want YYYY-MM-DD or a number of days such as 7d", v)
	}
	return t, nil
}

func seconds(s int64) string { return short(time.Duration(s) * time.Second) }

// eighths are the partial blocks that give a bar 1/8-cell resolution.
var eighths = []string{"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"}

// usageChart draws one bar per template per day, scaled so the longest is
// width cells. The day is written on its first line only.
func usageChart(w io.Writer, usage []client.UsageEntry, width int) {
	var most int64
	tplWidth := 0
	for _, u := range usage {
		most = max(most, u.Seconds)
		tplWidth = max(tplWidth, len(groupName(u)))
	}
	prevDay := ""
	for _, u := range usage {
		day := u.Day
		if day == prevDay {
			day = strings.Repeat(" ", len(day))
		}
		prevDay = u.Day
		fmt.Fprintf(w, "%s  %-*s  %s %s\n", day, tplWidth, groupName(u), bar(u.Seconds, most, width), seconds(u.Seconds))
	}
}

// bar is v of most drawn in width cells, padded to width.
func bar(v, most int64, width int) string {
	cells := 0
	if most > 0 {
		cells = int(v * int64(width) * 8 / most)
	}
	if v > 0 && cells == 0 {
		cells = 1 // any time at all shows
	}
	s := strings.Repeat("█", cells/8) + eighths[cells%8]
	used := cells / 8
	if cells%8 != 0 {
		used++
	}
	return s + strings.Repeat(" ", width-used)
}
