package main

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/domain"
)

func (a *app) issuersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "issuers",
		Aliases: []string{"issuer"},
		Short:   "Trust CI identity providers (OIDC issuers) instead of storing keys (admins only)",
		Long: `A trusted issuer lets CI jobs it vouches for exchange their OIDC identity
token for a short-lived envlease token, so no key is stored in the CI. The
conditions pin the claims a job's token must carry (repository, ref,
environment, ...; exact, or patterns such as refs/heads/*).`,
	}
	cmd.AddCommand(a.issuersAddCommand(), a.issuersListCommand(), a.issuersRemoveCommand())
	return cmd
}

func (a *app) issuersAddCommand() *cobra.Command {
	var (
		url, audience, lifetime string
		conditions, scopes      []string
		templates, projects     []string
		labels                  []string
	)
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Trust an OIDC issuer's CI jobs",
		Example: `  envlease issuers add github --url https://token.actions.githubusercontent.com \
    --audience envlease --condition repository=acme/app --condition ref=refs/heads/main \
    --scope environments:lease --scope environments:read --lifetime 30m`,
		Args: args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			conds, err := parseKV("--condition", conditions)
			if err != nil {
				return err
			}
			lbls, err := parseLabels(labels)
			if err != nil {
				return err
			}
			req := domain.IssuerRequest{Name: got[0], URL: url, Audience: audience, Conditions: conds, Scopes: scopes, TokenLifetime: lifetime}
			if len(templates) > 0 || len(projects) > 0 || len(lbls) > 0 {
				req.Restrictions = &domain.Restrictions{Templates: templates, Projects: projects, Labels: lbls}
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			is, err := s.client.CreateIssuer(ctx, req)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(map[string]any{"issuer": is})
			}
			return a.printIssuers([]domain.TrustedIssuer{is})
		}),
	}
	f := cmd.Flags()
	f.StringVar(&url, "url", "", "the issuer, as its tokens' iss claim says (https://token.actions.githubusercontent.com for GitHub Actions)")
	f.StringVar(&audience, "audience", defaultAudience, "the aud its tokens must carry")
	f.StringArrayVar(&conditions, "condition", nil, "CLAIM=VALUE the token must carry, exact or a pattern such as refs/heads/* (repeatable; at least one)")
	f.StringArrayVar(&scopes, "scope", nil, "a scope exchanged tokens get (repeatable; at least one)")
	f.StringVar(&lifetime, "lifetime", "", "how long exchanged tokens live, 1m to 1h (default 15m)")
	f.StringArrayVar(&templates, "template", nil, "restrict exchanged tokens' leases to this template (repeatable)")
	f.StringArrayVar(&projects, "project", nil, "restrict exchanged tokens' leases to this project (repeatable)")
	f.StringArrayVar(&labels, "require-label", nil, "exchanged tokens' leases must set label KEY=VALUE (repeatable)")
	return cmd
}

// parseKV reads KEY=VALUE pairs of flag.
func parseKV(flag string, pairs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usagef("%s %q: want KEY=VALUE", flag, p)
		}
		out[k] = v
	}
	return out, nil
}

func (a *app) issuersListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the trusted issuers",
		Args:    args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			is, err := s.client.ListIssuers(ctx)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(map[string]any{"issuers": is})
			}
			return a.printIssuers(is)
		}),
	}
}

func (a *app) issuersRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"remove"},
		Short:   "Stop trusting an issuer (tokens it issued live out their short lives)",
		Args:    args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			if err := s.client.DeleteIssuer(ctx, got[0]); err != nil {
				return err
			}
			a.say("Removed issuer %s.", got[0])
			return nil
		}),
	}
}

func (a *app) printIssuers(is []domain.TrustedIssuer) error {
	now := time.Now()
	t := newTable(a.stdout, "ID", "NAME", "URL", "AUDIENCE", "CONDITIONS", "SCOPES", "LIFETIME", "CREATED")
	for _, i := range is {
		var conds []string
		for k, v := range i.Conditions {
			conds = append(conds, k+"="+v)
		}
		sort.Strings(conds)
		t.row(i.ID, i.Name, i.URL, i.Audience, strings.Join(conds, ","), strings.Join(i.Scopes, ","), i.TokenLifetime.String(), ago(i.Created, now))
	}
	return t.flush()
}
