package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
)

func (a *app) webhooksCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "webhooks",
		Aliases: []string{"webhook"},
		Short:   "Manage webhooks: receivers of signed events (admins)",
		Long: `A webhook receives each event of the types it lists as a signed POST (see
docs/events.md for the signature and the receiver code).
Deliveries are retried for 24 hours; a webhook that keeps failing is disabled,
and retrying one of its deliveries by hand turns it back on.`,
	}
	cmd.AddCommand(a.webhooksCreateCommand(), a.webhooksListCommand(), a.webhooksDeleteCommand(),
		a.webhooksDeliveriesCommand(), a.webhooksRetryCommand())
	return cmd
}

func (a *app) webhooksCreateCommand() *cobra.Command {
	var types []string
	cmd := &cobra.Command{
		Use:     "create URL --type T [--type T]...",
		Short:   "Add a webhook; its signing secret goes to standard output, shown only this once",
		Example: `  SECRET=$(envlease webhooks create https://example.com/envlease-hooks --type environment. --type quota.refused)`,
		Args:    args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			if len(types) == 0 {
				return usagef(`--type is required: an event type, a kind such as "environment.", or "*"`)
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			out, err := s.client.CreateWebhook(ctx, client.WebhookCreate{URL: got[0], Types: types})
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(out)
			}
			a.say("Created webhook %s for %s; its signing secret is shown only this once:", out.Webhook.ID, strings.Join(out.Webhook.Types, ", "))
			_, err = a.stdout.Write([]byte(out.Secret + "\n"))
			return err
		}),
	}
	cmd.Flags().StringArrayVar(&types, "type", nil, `event type, kind ("environment.") or "*"; repeatable`)
	return cmd
}

func (a *app) webhooksListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the organization's webhooks",
		Args:    args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			hs, err := s.client.ListWebhooks(ctx)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(map[string]any{"webhooks": hs})
			}
			now := time.Now()
			t := newTable(a.stdout, "ID", "URL", "TYPES", "STATE", "CREATED")
			for _, h := range hs {
				state := h.State
				if h.DisabledReason != "" {
					state += " (" + h.DisabledReason + ")"
				}
				t.row(h.ID, h.URL, strings.Join(h.Types, ","), state, ago(h.Created, now))
			}
			return t.flush()
		}),
	}
}

func (a *app) webhooksDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID",
		Short: "Delete a webhook",
		Args:  args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			if err := s.client.DeleteWebhook(ctx, got[0]); err != nil {
				return err
			}
			a.say("Deleted webhook %s.", got[0])
			return nil
		}),
	}
}

func (a *app) webhooksDeliveriesCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "deliveries ID",
		Short: "A webhook's deliveries, newest first: state, response code, duration, next try",
		Args:  args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			page, err := s.client.ListDeliveries(ctx, got[0], client.PageQuery{Limit: limit})
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(page)
			}
			now := time.Now()
			t := newTable(a.stdout, "ID", "TYPE", "STATE", "CODE", "MS", "ATTEMPTS", "NEXT TRY", "ERROR")
			for _, d := range page.Deliveries {
				next := "-"
				if d.NextTry != nil {
					next = d.NextTry.UTC().Format(time.RFC3339)
					if d.NextTry.After(now) {
						next += " (in " + d.NextTry.Sub(now).Round(time.Second).String() + ")"
					}
				}
				t.row(d.ID, d.Type, d.State, strconv.Itoa(d.LastCode), strconv.FormatInt(d.LastMs, 10), strconv.Itoa(len(d.Attempts)), next, d.LastError)
			}
			return t.flush()
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "how many, 1 to 100")
	return cmd
}

func (a *app) webhooksRetryCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "retry ID DELIVERY",
		Short: "Queue a delivery again, due now (and turn a disabled webhook back on)",
		Args:  args(2),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			d, err := s.client.RetryDelivery(ctx, got[0], got[1])
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(d)
			}
			a.say("Delivery %s is %s.", d.ID, d.State)
			return nil
		}),
	}
}
