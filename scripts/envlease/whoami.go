package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func (a *app) whoamiCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show who the token acts as",
		Long: `Show the organization, the person (or organization key) the token acts as,
its role, and the token's own record, as the API says now (GET /v1/whoami).`,
		Args: args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			id, err := s.client.Whoami(ctx)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(map[string]any{"profile": s.name, "url": s.client.BaseURL(), "identity": id})
			}
			who, kind := id.User, "USER"
			if who == "" {
				who, kind = fmt.Sprintf("organization key %q", id.Key.Name), "KEY"
			}
			sandbox := ""
			if s.ownSandbox {
				sandbox = s.profile.Sandbox
				if s.profile.SandboxName != "" {
					sandbox += " (" + s.profile.SandboxName + ")"
				}
			}
			return details(a.stdout,
				"PROFILE", s.name,
				"URL", s.client.BaseURL(),
				"ORGANIZATION", id.Organization,
				kind, who,
				"ROLE", string(id.Role),
				"TOKEN", fmt.Sprintf("%s %q (%s…), created %s", id.Key.ID, id.Key.Name, id.Key.Prefix, ago(id.Key.Created, time.Now())),
				"SCOPES", scopesCell(id.Key),
				"EXPIRES", agoPtr(id.Key.Expires, time.Now()),
				"SANDBOX", sandbox,
			)
		}),
	}
}
