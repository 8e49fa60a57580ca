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
	cmd.AddCommand(&cobra.Command{
		Use:     "create NAME",
		Short:   "Create a CLI token that acts as you",
		Example: `  envlease tokens create laptop | envlease login --url "$URL" --profile laptop`,
		Args:    args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			issued, err := s.client.CreateToken(ctx, got[0])
			if err != nil {
				return err
			}
			return a.printIssued("CLI token", issued)
		}),
	})
	return cmd
}
