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
	"github.com/envlease/envlease/shared/domain"
)

func (a *app) netCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "net",
		Short: "An environment's network: its rules and its log of connections",
		Long: `An environment of a template with network open or rules reaches out through its
node's network boundary, which decides every connection and DNS question by the
environment's rules and keeps a log of them (docs/nodes.md, "Network boundary").`,
	}
	cmd.AddCommand(a.netLogCommand(), a.netRulesCommand(), a.netEditCommand("allow"), a.netEditCommand("deny"))
	return cmd
}

// netRulesCommand shows an environment's own network layer.
func (a *app) netRulesCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rules ENV",
		Short: "Show an environment's own network rules (within its template's policy)",
		Long: `Show the allow and deny entries of an environment's own network layer: set at
lease (envlease run --allow) or since (envlease net allow|deny). A connection needs
the template's policy (envlease templates) and these both to allow it.`,
		Args:              args(1),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, _ *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			e, err := s.client.GetEnvironment(ctx, got[0])
			if err != nil {
				return err
			}
			n := domain.EnvNetwork{}
			if e.Network != nil {
				n = *e.Network
			}
			n = n.Normalized()
			if a.json() {
				return a.printJSON(map[string]any{"environment": e.ID, "template": e.Template, "network": n})
			}
			a.printNetwork(e.ID, e.Template, n)
			return nil
		}),
	}
}

func (a *app) printNetwork(id, template string, n domain.EnvNetwork) {
	fmt.Fprintf(a.stdout, "%s (template %s)\n", id, template)
	if len(n.Allow) == 0 {
		fmt.Fprintln(a.stdout, "allow: whatever the template allows")
	} else {
		fmt.Fprintf(a.stdout, "allow: %s\n", strings.Join(n.Allow, " "))
	}
	if len(n.Deny) > 0 {
		fmt.Fprintf(a.stdout, "deny:  %s\n", strings.Join(n.Deny, " "))
	}
}

// netEditCommand adds entries to (or with --remove takes them from) an
// environment's own allow or deny list; its node applies the change at
// once, closing open connections it refuses.
func (a *app) netEditCommand(list string) *cobra.Command {
	var remove bool
	short := map[string]string{
		"allow": "Let a running environment reach only what its allow entries name (within its template's policy)",
		"deny":  "Keep a running environment from what these entries name, closing such connections",
	}[list]
	cmd := &cobra.Command{
		Use:   list + " ENV ENTRY... [--remove]",
		Short: short,
		Long: short + `.

An entry is a domain (github.com), a wildcard (*.pypi.org: every name below it),
an address, a CIDR, or * (every address), each with an optional :PORT or
:LOW-HIGH. Deny wins over allow. The node applies the change at once: new
connections are decided by it, open ones it refuses are closed. Needs the scope
environments:network.`,
		Example:           "  envlease net " + list + " env_7mq2x9c4kd1n github.com '*.pypi.org:443'\n  envlease net " + list + " env_7mq2x9c4kd1n github.com --remove",
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, _ *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			e, err := s.client.GetEnvironment(ctx, got[0])
			if err != nil {
				return err
			}
			var cur []string
			if e.Network != nil {
				cur = map[string][]string{"allow": e.Network.Allow, "deny": e.Network.Deny}[list]
			}
			next := editEntries(cur, got[1:], remove)
			patch := client.NetworkPatch{}
			if list == "allow" {
				patch.Allow = &next
			} else {
				patch.Deny = &next
			}
			e, err = s.client.SetNetwork(ctx, got[0], patch)
			if err != nil {
				return err
			}
			n := domain.EnvNetwork{}
			if e.Network != nil {
				n = *e.Network
			}
			n = n.Normalized()
			if a.json() {
				return a.printJSON(map[string]any{"environment": e.ID, "template": e.Template, "network": n})
			}
			a.printNetwork(e.ID, e.Template, n)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&remove, "remove", false, "take the entries out of the list instead of adding them")
	return cmd
}

// editEntries adds entries to cur (once each, in order) or removes them.
func editEntries(cur, entries []string, remove bool) []string {
	out := []string{}
	drop := map[string]bool{}
	if remove {
		for _, e := range entries {
			drop[strings.ToLower(e)] = true
		}
	}
	seen := map[string]bool{}
	for _, e := range append(append([]string{}, cur...), map[bool][]string{false: entries, true: nil}[remove]...) {
		k := strings.ToLower(e)
		if seen[k] || drop[k] {
			continue
		}
		seen[k] = true
		out = append(out, e)
	}
	return out
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
