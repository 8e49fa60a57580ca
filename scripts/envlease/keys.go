package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

func (a *app) keysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "keys",
		Aliases: []string{"key"},
		Short:   "Create, list and revoke organization API keys and tokens",
		Long: `Organization API keys belong to the organization and act with member rights,
for CI and other scripts. Admins create them. 'keys ls' lists every kind of
key an admin may see (a member sees their own CLI tokens), and 'keys revoke'
revokes any of them.`,
	}
	cmd.AddCommand(a.keysCreateCommand(), a.keysListCommand(), a.keysRevokeCommand())
	return cmd
}

func (a *app) keysCreateCommand() *cobra.Command {
	var g grantFlags
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an organization API key (admins only)",
		Example: `  KEY=$(envlease keys create ci)
  KEY=$(envlease keys create ci --scope environments:lease --template shell --expires 720h)`,
		Args: args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			grant, err := g.grant()
			if err != nil {
				return err
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			issued, err := s.client.CreateKeyWith(ctx, got[0], grant)
			if err != nil {
				return err
			}
			return a.printIssued("organization API key", issued)
		}),
	}
	g.add(cmd.Flags())
	return cmd
}

// printIssued shows a new token. In the plain view the token alone goes to
// standard output, so $(envlease keys create ci) captures just it.
func (a *app) printIssued(what string, issued client.IssuedKey) error {
	if a.json() {
		return a.printJSON(issued)
	}
	a.say("Created %s %q (%s). The token is shown only this once:", what, issued.APIKey.Name, issued.APIKey.ID)
	_, err := a.stdout.Write([]byte(issued.Token + "\n"))
	return err
}

func (a *app) keysListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the keys you may see",
		Args:    args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			ks, err := s.client.ListKeys(ctx)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(map[string]any{"keys": ks})
			}
			now := time.Now()
			// SCOPES "*" is every right of the holder (a token without scopes).
			t := newTable(a.stdout, "ID", "NAME", "OWNER", "SOURCE", "PREFIX", "SCOPES", "CREATED", "LAST USED", "EXPIRES", "REVOKED")
			for _, k := range ks {
				t.row(k.ID, k.Name, k.Owner.Kind+":"+k.Owner.ID, k.Source, k.Prefix+"…", scopesCell(k), ago(k.Created, now), agoPtr(k.LastUsed, now), agoPtr(k.Expires, now), agoPtr(k.Revoked, now))
			}
			return t.flush()
		}),
	}
}

func (a *app) keysRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a key: its token then gets 401",
		Args:  args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			k, err := s.client.RevokeKey(ctx, got[0])
			if err != nil {
				return err
			}
			return a.printKey(k)
		}),
	}
}

func (a *app) printKey(k domain.APIKey) error {
	if a.json() {
		return a.printJSON(map[string]any{"apiKey": k})
	}
	now := time.Now()
	t := newTable(a.stdout, "ID", "NAME", "OWNER", "PREFIX", "REVOKED")
	t.row(k.ID, k.Name, k.Owner.Kind+":"+k.Owner.ID, k.Prefix+"…", agoPtr(k.Revoked, now))
	return t.flush()
}
