package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

func (a *app) eventsCommand() *cobra.Command {
	var (
		follow       bool
		typ, subject string
		since        string
		limit        int
		poll         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "events [--follow] [--type T] [--subject KIND/ID]",
		Short: "Show what happened in the organization: leases, stops and why, keys, quotas, nodes",
		Long: `Show the organization's events, oldest first, ending with the latest: the last
--limit of them, or all since --since. With --follow, keep printing new ones as
they happen (polling every --poll) until interrupted.

--type is an event type (environment.stopped) or a kind ending in "."
(environment.); --subject is KIND/ID (environment/env_...). A stopped or failed
environment's event says why it stopped: deleted, idle, hard, node, lost, left,
failed (with the error).

With -o json each event is one JSON object per line.`,
		Example: `  envlease events
  envlease events --type environment. --follow
  envlease events --subject environment/env_7mq2x9c4kd1n -o json`,
		Args: args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return usagef("--limit %d: want 1 to 1000", limit)
			}
			var from time.Time
			if since != "" {
				t, err := parseEventSince(since, time.Now())
				if err != nil {
					return err
				}
				from = t
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			q := client.EventQuery{Type: typ, Subject: subject, Since: from}
			evs, err := a.latestEvents(ctx, s.client, q, limit, !from.IsZero())
			if err != nil {
				return err
			}
			if !a.json() && len(evs) == 0 && !follow {
				a.say("No events.")
				return nil
			}
			pr := a.eventPrinter()
			for i := len(evs) - 1; i >= 0; i-- {
				pr(evs[i])
			}
			if !follow {
				return nil
			}
			return a.followEvents(ctx, s.client, q, evs, poll, pr)
		}),
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new events until interrupted")
	f.StringVar(&typ, "type", "", `an event type, or a kind ending in "." such as "environment."`)
	f.StringVar(&subject, "subject", "", "only the events of one resource: KIND/ID, such as environment/env_...")
	f.StringVar(&since, "since", "", "only events since: an RFC 3339 time, or a duration back such as 30m or 2h")
	f.IntVar(&limit, "limit", 20, "how many of the latest events to show first")
	f.DurationVar(&poll, "poll", 2*time.Second, "with --follow, how often to ask for new events")
	return cmd
}

// parseEventSince reads --since: an RFC 3339 time or a duration back from now.
func parseEventSince(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, usagef("--since %q: want an RFC 3339 time or a duration such as 30m", v)
	}
	return t, nil
}

// latestEvents returns the newest events matching q, newest first: up to
// limit of them, or (all) every one since q.Since.
func (a *app) latestEvents(ctx context.Context, c *client.Client, q client.EventQuery, limit int, all bool) ([]domain.Event, error) {
	var out []domain.Event
	for {
		q.Limit = min(200, max(limit-len(out), 1))
		if all {
			q.Limit = 200
		}
		page, err := c.ListEvents(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Events...)
		if page.Next == "" || (!all && len(out) >= limit) {
			break
		}
		q.Cursor = page.Next
	}
	if !all && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// followLookback is how far before the newest event seen each poll asks
// again: an event's time is when its writer stamped it, and a transaction
// stamped earlier may commit after a later one was already read (and the
// kind and subject listings read an eventually consistent index).
const followLookback = time.Minute

// followEvents polls for events newer than those seen and prints them,
// oldest first, until the context ends (an interrupt is not an error).
func (a *app) followEvents(ctx context.Context, c *client.Client, q client.EventQuery, seen []domain.Event, poll time.Duration, pr func(domain.Event)) error {
	last := time.Now().Add(-time.Minute)
	ids := map[string]time.Time{} // printed, by id: skipped when read again
	for _, e := range seen {
		ids[e.ID] = e.Time
		if e.Time.After(last) {
			last = e.Time
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
		// Since a look-back before the newest seen: ids already printed are
		// skipped, and forgotten once they are older than any poll reads.
		q.Since, q.Cursor = last.Add(-followLookback), ""
		for id, at := range ids {
			if at.Before(q.Since) {
				delete(ids, id)
			}
		}
		evs, err := a.latestEvents(ctx, c, q, 0, true)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		sort.Slice(evs, func(i, j int) bool { return evs[i].ID < evs[j].ID })
		for _, e := range evs {
			if _, ok := ids[e.ID]; ok {
				continue
			}
			ids[e.ID] = e.Time
			pr(e)
			if e.Time.After(last) {
				last = e.Time
			}
		}
	}
}

// eventPrinter prints one event: a JSON line, or a table-like line.
func (a *app) eventPrinter() func(domain.Event) {
	if a.json() {
		enc := json.NewEncoder(a.stdout)
		enc.SetEscapeHTML(false)
		return func(e domain.Event) { _ = enc.Encode(e) }
	}
	fmt.Fprintf(a.stdout, "%-20s  %-21s  %-40s  %-24s  %s\n", "TIME", "TYPE", "SUBJECT", "ACTOR", "DETAILS")
	return func(e domain.Event) {
		fmt.Fprintf(a.stdout, "%-20s  %-21s  %-40s  %-24s  %s\n", e.Time.UTC().Format("2006-01-02T15:04:05Z"), e.Type,
			e.Subject.String(), e.Actor.Kind+":"+e.Actor.ID, eventDetails(e))
	}
}

// eventDetails is the part of an event's data a person looks for first:
// why an environment stopped, what a refused lease ran into.
func eventDetails(e domain.Event) string {
	d := e.Data
	var parts []string
	add := func(k string) {
		if v, ok := d[k]; ok && fmt.Sprint(v) != "" {
			s := fmt.Sprint(v)
			if strings.ContainsAny(s, " \t") {
				s = fmt.Sprintf("%q", s)
			}
			parts = append(parts, k+"="+s)
		}
	}
	switch domain.EventKind(e.Type) {
	case "environment":
		for _, k := range []string{"template", "name", "reason", "error", "node", "readyMs"} {
			add(k)
		}
	case "quota":
		for _, k := range []string{"template", "limit", "running"} {
			add(k)
		}
	case "webhook":
		for _, k := range []string{"url", "reason"} {
			add(k)
		}
	default:
		keys := make([]string, 0, len(d))
		for k := range d {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if _, nested := d[k].(map[string]any); !nested {
				add(k)
			}
		}
	}
	return strings.Join(parts, " ")
}
