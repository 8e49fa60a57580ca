package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) logoutCommand() *cobra.Command {
	var revoke bool
	cmd := &cobra.Command{
		Use:   "logout [--profile NAME] [--revoke]",
		Short: "Forget a profile's token",
		Long: `Remove the profile (its URL, token and sandbox) from the configuration file.
With --revoke the token is first revoked at the API, so it stops working
everywhere, not only on this machine.`,
		Args: args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			cfg, path, err := loadConfig()
			if err != nil {
				return err
			}
			name, err := a.profileName(cfg)
			if err != nil {
				return err
			}
			if cfg.Profiles[name] == nil {
				return &authError{msg: fmt.Sprintf("profile %q is not logged in", name)}
			}
			var revoked string
			if revoke {
				s, err := a.session()
				if err != nil {
					return err
				}
				id, err := s.client.Whoami(ctx)
				if err != nil {
					return err
				}
				k, err := s.client.RevokeKey(ctx, id.Key.ID)
				if err != nil {
					return fmt.Errorf("revoking %s: %w", id.Key.ID, err)
				}
				revoked = k.ID
			}
			delete(cfg.Profiles, name)
			if cfg.Default == name {
				cfg.Default = ""
			}
			if err := cfg.save(path); err != nil {
				return err
			}
			if revoked != "" {
				a.say("Revoked token %s.", revoked)
			}
			a.say("Logged out of profile %q.", name)
			if a.json() {
				return a.printJSON(map[string]any{"profile": name, "revoked": revoked})
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&revoke, "revoke", false, "revoke the token at the API too")
	return cmd
}
