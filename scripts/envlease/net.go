package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
)

func (a *app) netCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "net",
		Short: "An environment's network: its log of connections",
		Long: `An environment of a template with network open or rules reaches out through its
node's network boundary, which decides every connection and DNS question by the
environment's rules and keeps a log of them (docs/nodes.md, "Network boundary").`,
	}
	cmd.AddCommand(a.netLogCommand())
	return cmd
}

func (a *app) netLogCommand() *cobra.Command {
	var (
		follow bool
		since  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "log ENV [-f] [--since DURATION]",
		Short: "Show what an environment connected to, tried to, and asked DNS for",
		Long: `Show a running environment's network log, live from its node: one line per
connection (when it ends), refused connection and DNS question, with the rule that
decided it, its verdict and the bytes each way. With -f, keep printing until the
environment ends. With -o json, print each record as the node keeps it (one JSON
object a line).`,
		Example: `  envlease net log env_7mq2x9c4kd1n
  envlease net log env_7mq2x9c4kd1n -f -o json`,
		Args:              args(1),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			if since < 0 {
				return usagef("--since %s: want a positive duration", since)
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			w := &netLines{json: a.json(), out: a.stdout}
			err = s.client.ReadNetworkLog(ctx, got[0], client.LogOptions{Follow: follow, Since: since}, w)
			w.flush()
			return err
		}),
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing until the environment ends")
	f.DurationVar(&since, "since", 0, "start at what was recorded this long ago, for example 5m")
	return cmd
}

// netLines prints network log records as they come: whole JSON lines with
// -o json, one readable line each otherwise. A line that is not a record
// (where the node's ring cut one, or its note of bytes a follower missed)
// is left out of JSON and shown as it is otherwise.
type netLines struct {
	json    bool
	out     io.Writer
	partial []byte
}

func (w *netLines) Write(p []byte) (int, error) {
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.line(w.partial[:i])
		w.partial = w.partial[i+1:]
	}
}

func (w *netLines) flush() {
	if len(w.partial) > 0 {
		w.line(w.partial)
		w.partial = nil
	}
}

func (w *netLines) line(b []byte) {
	if len(bytes.TrimSpace(b)) == 0 {
		return
	}
	var r client.NetworkRecord
	if err := json.Unmarshal(b, &r); err != nil {
		if !w.json {
			fmt.Fprintf(w.out, "%s\n", b)
		}
		return
	}
	if w.json {
		fmt.Fprintf(w.out, "%s\n", b)
		return
	}
	fmt.Fprintln(w.out, formatNetRecord(r))
}

// formatNetRecord is one record as a line: time, verdict, protocol,
// destination and name, rule, then bytes and duration or error.
func formatNetRecord(r client.NetworkRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-6s %-3s ", r.Time.Local().Format("15:04:05.000"), r.Verdict, r.Proto)
	switch r.Proto {
	case "dns":
		fmt.Fprintf(&b, "%s %s", r.Type, r.Name)
		if len(r.Answers) > 0 {
			fmt.Fprintf(&b, " -> %s", strings.Join(r.Answers, ","))
		}
	default:
		fmt.Fprintf(&b, "%s:%d", r.Addr, r.Port)
		if r.Name != "" {
			fmt.Fprintf(&b, " (%s, %s)", r.Name, r.NameFrom)
		}
	}
	fmt.Fprintf(&b, "  [%s]", r.Rule)
	if r.Proto != "dns" && r.Verdict == "allow" {
		fmt.Fprintf(&b, "  sent %d, received %d, %.1f ms", r.Sent, r.Received, r.DurationMs)
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "  (%s)", r.Error)
	}
	if r.Suppressed > 0 {
		fmt.Fprintf(&b, "  (%d more refusals not recorded)", r.Suppressed)
	}
	return b.String()
}
