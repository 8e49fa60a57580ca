package main

import (
	"context"

	"github.com/spf13/cobra"
)

func (a *app) tokensCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "tokens",
		Aliases: []string{"token"},
		Short:   "Create CLI tokens that act as you",
		Long: `A CLI token belongs to you and acts with your role. List and revoke tokens
with 'envlease keys ls' and 'envlease keys revoke'.`,
	}
	var g grantFlags
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a CLI token that acts as you",
		Example: `  envlease tokens create laptop | envlease login --url "$URL" --profile laptop
  envlease tokens create ci --scope environments:lease --scope environments:read --expires 1h`,
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
			issued, err := s.client.CreateTokenWith(ctx, got[0], grant)
			if err != nil {
				return err
			}
			return a.printIssued("CLI token", issued)
		}),
	}
	g.add(create.Flags())
	cmd.AddCommand(create, a.tokensExchangeCommand())
	return cmd
}
