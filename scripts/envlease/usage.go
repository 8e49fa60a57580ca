package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
)

func (a *app) usageCommand() *cobra.Command {
	var since string
	cmd := &cobra.Command{
		Use:   "usage [--since DATE]",
		Short: "Show environment time per template per day, as a table and a chart",
		Long: `Show the seconds of environment time per template per UTC day, from --since
through today, as a table and as a bar chart drawn in the terminal.

--since is a UTC day (2026-03-01) or a number of days back (7d); the default
is the service's, 30 days back.`,
		Example: `  envlease usage
  envlease usage --since 7d
  envlease usage --since 2026-03-01 -o json`,
		Args: args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			from, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			report, err := s.client.Usage(ctx, from)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(report)
			}
			if len(report.Usage) == 0 {
				a.say("No environment time since %s.", report.Since.UTC().Format(time.DateOnly))
				return nil
			}
			t := newTable(a.stdout, "DAY", "TEMPLATE", "TIME", "SECONDS")
			for _, u := range report.Usage {
				t.row(u.Day, u.Template, seconds(u.Seconds), strconv.FormatInt(u.Seconds, 10))
			}
			if err := t.flush(); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout)
			usageChart(a.stdout, report.Usage, 40)
			return nil
		}),
	}
	cmd.Flags().StringVar(&since, "since", "", "first UTC day: YYYY-MM-DD, or Nd for N days back (default: 30 days back)")
	return cmd
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
		tplWidth = max(tplWidth, len(u.Template))
	}
	prevDay := ""
	for _, u := range usage {
		day := u.Day
		if day == prevDay {
			day = strings.Repeat(" ", len(day))
		}
		prevDay = u.Day
		fmt.Fprintf(w, "%s  %-*s  %s %s\n", day, tplWidth, u.Template, bar(u.Seconds, most, width), seconds(u.Seconds))
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
