package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/logline"
)

// failedLogLines is how much of an environment's log run shows when it fails
// to become ready.
const failedLogLines = 40

func (a *app) logsCommand() *cobra.Command {
	var (
		follow bool
		since  time.Duration
		raw    bool
	)
	cmd := &cobra.Command{
		Use:   "logs ENV [-f] [--since DURATION] [--raw]",
		Short: "Show an environment's output: live from its node while it runs, kept after it ended",
		Long: `Show an environment's log: what its command wrote to standard output and standard
error, and the node's own lines about it ([envlease ...]: claimed, started,
ready, exited with its code, stopped). While the environment runs the log is read
live from its node; once it ended, the log its node kept (an artifact of the
organization, linked from the environment) is shown.

With -f, keep printing what the environment writes until it ends (or until
interrupted). --since starts a live log at what was written that long ago.
The node keeps the last 16 MiB of each log (the agent's -log-max); a log cut
says so on its first line.

On a terminal, control characters the environment wrote (escape sequences that
would set the window's title, clear the screen or write the clipboard) are shown
escaped, such as \x1b, and only the node's own lines begin with [envlease: an
environment's line that does is shown after a backslash. --raw prints the log's
bytes as they are (the node's lines then begin with the byte 0x1e), as does
output that is not a terminal.

With -o json, print where the log is (the node's URL and a ticket, or the kept
artifact and a download link) instead of the log itself.`,
		Example: `  envlease logs env_7mq2x9c4kd1n
  envlease logs env_7mq2x9c4kd1n -f --since 5m`,
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
			if a.json() {
				l, err := s.client.EnvironmentLogs(ctx, got[0])
				if err != nil {
					return err
				}
				return a.printJSON(l)
			}
			out := io.Writer(a.stdout)
			if !raw && isTerminal(a.stdout) {
				term := logline.Terminal(a.stdout)
				defer term.Close()
				out = term
			}
			l, err := s.client.ReadLogs(ctx, got[0], client.LogOptions{Follow: follow, Since: since}, out)
			if err == nil && l.Kept != nil && since > 0 {
				a.say("(%s has ended: its kept log is shown whole; --since applies to live logs)", got[0])
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing the log until the environment ends")
	f.DurationVar(&since, "since", 0, "start at what was written this long ago (live logs), for example 5m")
	f.BoolVar(&raw, "raw", false, "print the log's bytes as they are, control characters included, even on a terminal")
	return cmd
}

// sayFailedLog shows the end of the log of an environment that failed to
// become ready, on standard error, each line escaped (logline.Escape); a log that cannot be read is said in a
// line, never in place of the failure itself.
func (a *app) sayFailedLog(ctx context.Context, c *client.Client, env domain.Environment) {
	if env.State != domain.StateFailed && env.State != domain.StateStopped {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var b bytes.Buffer
	if _, err := c.ReadLogs(ctx, env.ID, client.LogOptions{}, &b); err != nil {
		a.say("(the log of %s cannot be shown: %v)", env.ID, err)
		return
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		a.say("(the log of %s is empty)", env.ID)
		return
	}
	head := fmt.Sprintf("The log of %s", env.ID)
	if len(lines) > failedLogLines {
		head += fmt.Sprintf(" (its last %d lines; envlease logs %s shows it all)", failedLogLines, env.ID)
		lines = lines[len(lines)-failedLogLines:]
	}
	a.say("%s:", head)
	// Shown escaped wherever it goes: it is quoted within run's own messages.
	for _, l := range lines {
		a.say("  %s", logline.Escape(l))
	}
}
