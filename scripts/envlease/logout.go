package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
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
			// The profile is forgotten whatever the revoke does: a token
			// that no longer works (expired, revoked) has nothing left to
			// revoke, and a user who logs out must not be kept logged in.
			var revoked string
			var revokeErr error
			if revoke {
				revoked, revokeErr = a.revokeOwnToken(ctx)
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
			if revokeErr != nil {
				return fmt.Errorf("the profile is forgotten, but its token was NOT revoked: %w; revoke it with 'envlease keys revoke KEY_ID' from another login, or in the console", revokeErr)
			}
			if a.json() {
				return a.printJSON(map[string]any{"profile": name, "revoked": revoked})
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&revoke, "revoke", false, "revoke the token at the API too")
	return cmd
}

// revokeOwnToken revokes the token the session uses. A token the service no
// longer accepts (401: expired, revoked, unknown) needs no revoking.
func (a *app) revokeOwnToken(ctx context.Context) (string, error) {
	s, err := a.session()
	if err != nil {
		return "", err
	}
	id, err := s.client.Whoami(ctx)
	if client.StatusOf(err) == http.StatusUnauthorized {
		a.say("The token no longer works (%v): nothing to revoke.", err)
		return "", nil
	}
	if err != nil {
		return "", err
	}
	k, err := s.client.RevokeKey(ctx, id.Key.ID)
	if err != nil {
		return "", fmt.Errorf("revoking %s: %w", id.Key.ID, err)
	}
	return k.ID, nil
}
