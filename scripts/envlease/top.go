package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

// topKept is how many samples top's sparklines show.
const topKept = 60

func (a *app) topCommand() *cobra.Command {
	var once bool
	cmd := &cobra.Command{
		Use:   "top ENV [--once]",
		Short: "Show an environment's CPU, memory, disk, network and processes, live",
		Long: `Show what an environment uses, sampled by its node every 5 seconds: CPU (a
percentage of one CPU), memory, disk (what it wrote to its disk of its own),
the bytes per second through its network boundary, and its processes.

While it runs the samples come live from its node and top refreshes with each
until interrupted (on a terminal: the latest values and a line of the last
minutes; otherwise one line per sample). --once prints the latest sample and
exits. Once it ended, top prints the coarse history its node kept of its
whole life. With -o json, each sample is a JSON object on a line of its own
(a stream while it runs).`,
		Example: `  envlease top env_7mq2x9c4kd1n
  envlease top env_7mq2x9c4kd1n -o json | jq .cpu`,
		Args:              args(1),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			tty := isTerminal(a.stdout) && !a.json() && !once
			var (
				kept    []domain.MetricSample
				printed bool
				last    *domain.MetricSample
			)
			enc := json.NewEncoder(a.stdout)
			show := func(x domain.MetricSample) error {
				switch {
				case once:
					last = &x
					return nil
				case a.json():
					return enc.Encode(x)
				case tty:
					kept = append(kept, x)
					if len(kept) > topKept {
						kept = kept[len(kept)-topKept:]
					}
					return drawTop(a.stdout, got[0], kept)
				}
				if !printed {
					printed = true
					fmt.Fprintln(a.stdout, topHeader)
				}
				_, err := fmt.Fprintln(a.stdout, topLine(x))
				return err
			}
			m, err := s.client.ReadMetrics(ctx, got[0], client.MetricsOptions{Follow: !once}, show)
			if err != nil && ctx.Err() == nil {
				return err
			}
			if once {
				switch {
				case last == nil:
					a.say("(no sample of %s yet: its node samples every 5 seconds)", got[0])
				case a.json():
					return enc.Encode(last)
				default:
					fmt.Fprintln(a.stdout, topHeader)
					fmt.Fprintln(a.stdout, topLine(*last))
				}
			}
			if m.Live == nil && !a.json() && len(m.History) == 0 {
				a.say("(%s is %s and its node kept no history of its use)", got[0], m.State)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&once, "once", false, "print the latest sample and exit")
	return cmd
}

const topHeader = "TIME                  CPU%     MEMORY       DISK     NET IN    NET OUT  PROCS"

func topLine(x domain.MetricSample) string {
	disk := "-"
	if x.Disk != nil {
		disk = size(*x.Disk)
	}
	return fmt.Sprintf("%-20s %6.1f %10s %10s %8s/s %8s/s %6d", x.Time.UTC().Format("2006-01-02T15:04:05Z"), x.CPU,
		size(x.Memory), disk, size(int64(x.NetIn)), size(int64(x.NetOut)), x.Processes)
}

// drawTop redraws the terminal: the latest sample and, for CPU and
// memory, a sparkline of the kept ones.
func drawTop(w io.Writer, env string, kept []domain.MetricSample) error {
	x := kept[len(kept)-1]
	var cpu, mem []float64
	for _, k := range kept {
		cpu = append(cpu, k.CPU)
		mem = append(mem, float64(k.Memory))
	}
	var b strings.Builder
	b.WriteString("\x1b[H\x1b[2J")
	fmt.Fprintf(&b, "%s  (every 5 s; Ctrl-C to quit)\n\n%s\n%s\n\n", env, topHeader, topLine(x))
	fmt.Fprintf(&b, "CPU     %s\nMEMORY  %s\n", sparkline(cpu), sparkline(mem))
	_, err := io.WriteString(w, b.String())
	return err
}

// sparkline draws values as block characters, scaled to their maximum.
func sparkline(v []float64) string {
	const bars = "▁▂▃▄▅▆▇█"
	levels := []rune(bars)
	top := 0.0
	for _, x := range v {
		top = max(top, x)
	}
	var b strings.Builder
	for _, x := range v {
		i := 0
		if top > 0 {
			i = min(int(x/top*float64(len(levels)-1)+0.5), len(levels)-1)
		}
		b.WriteRune(levels[i])
	}
	return b.String()
}
