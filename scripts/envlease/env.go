package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

// printEnvironment writes one environment: its JSON, or its fields.
func (a *app) printEnvironment(e domain.Environment) error {
	if a.json() {
		return a.printJSON(e)
	}
	if a.quiet {
		_, err := fmt.Fprintln(a.stdout, e.ID)
		return err
	}
	defer a.sayHowToReach([]domain.Environment{e})
	now := time.Now()
	readyIn := ""
	if e.ReadyMs != nil {
		readyIn = strconv.FormatInt(*e.ReadyMs, 10) + " ms"
	}
	var shares []string
	for _, s := range e.Shares {
		shares = append(shares, s.Name+" "+s.LocalPath+"->"+s.EnvPath)
	}
	stopped := ""
	if e.Stopped != nil {
		stopped = ago(*e.Stopped, now)
		if e.StopReason != "" {
			stopped += " (" + e.StopReason + ")"
		}
	}
	idleUntil := ""
	if e.State.Live() {
		idleUntil = ago(e.IdleUntil, now)
	}
	paused := ""
	if e.State == domain.StatePaused && e.PausedAt != nil {
		paused = ago(*e.PausedAt, now) + " (" + orDash(e.StopReason) + ")"
		if e.RetainUntil != nil {
			paused += ", kept until " + ago(*e.RetainUntil, now) + "; a touch, exec, tunnel or 'envlease wake' wakes it"
		}
	}
	return details(a.stdout,
		"ID", e.ID,
		"NAME", e.Name,
		"TEMPLATE", e.Template,
		"STATE", string(e.State),
		"ERROR", e.Error,
		"POOL", e.Pool,
		"NODE", e.Node,
		"SANDBOX", e.Sandbox,
		"LABELS", labels(e.Labels),
		"PROJECT", e.Project,
		"EXPORTS", exports(e.Exports),
		"SHARES", strings.Join(shares, ", "),
		"CREATED", ago(e.Created, now)+" by "+e.CreatedBy,
		"READY", readyAfter(e.Ready, readyIn, now),
		"IDLE UNTIL", idleUntil,
		"EXPIRES", ago(e.Expires, now),
		"TIMEOUTS", "idle "+e.Idle.String()+", hard "+e.Hard.String(),
		"STOPPED", stopped,
		"PAUSED", paused,
		"SNAPSHOT", e.Snapshot,
	)
}

// sayHowToReach tells, on standard error, how to reach the exports of the
// live environments shown: their listen addresses on this machine answer
// only while something forwards them, and without a sandbox they have none.
func (a *app) sayHowToReach(envs []domain.Environment) {
	var listen, none []string
	for _, e := range envs {
		if !e.State.Live() || len(e.Exports) == 0 {
			continue
		}
		if e.Exports[0].Listen != "" {
			listen = append(listen, e.ID)
		} else {
			none = append(none, e.ID)
		}
	}
	if len(listen) == 1 {
		a.say("The export addresses answer while they are forwarded: envlease port-forward %s (or lease with --forward).", listen[0])
	} else if len(listen) > 1 {
		a.say("Export addresses answer while they are forwarded: envlease port-forward ID (or lease with --forward).")
	}
	if len(none) > 0 {
		a.say("%s has exports but no sandbox to listen on: lease with this machine as the sandbox ('envlease sandbox register', then lease --forward) to reach them.", strings.Join(none, ", "))
	}
}

func readyAfter(t *time.Time, after string, now time.Time) string {
	if t == nil {
		return ""
	}
	return ago(*t, now) + " (after " + after + ")"
}

// completeEnvironments offers the live environments' ids to the shell.
func (a *app) completeEnvironments(cmd *cobra.Command, got []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(got) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	s, err := a.session()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	page, err := s.client.ListEnvironments(cmd.Context(), client.EnvironmentQuery{Limit: 200})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, e := range page.Environments {
		out = append(out, e.ID+"\t"+e.Name+" ("+string(e.State)+")")
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeTemplates offers the organization's template names.
func (a *app) completeTemplates(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	s, err := a.session()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	list, err := s.client.Templates(cmd.Context())
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, t := range list.Templates {
		out = append(out, t.Name+"\t"+t.Description)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
