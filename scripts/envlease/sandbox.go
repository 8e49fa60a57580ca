package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

func (a *app) sandboxCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sandboxes"},
		Short:   "Register this machine as a sandbox, list sandboxes",
		Long: `A sandbox is a client machine environments forward their services to.
'envlease sandbox register' registers this machine once per profile; leases
made with the profile then name it, so their exports get listen addresses.`,
	}
	cmd.AddCommand(a.sandboxRegisterCommand(), a.sandboxListCommand(), a.sandboxGetCommand())
	return cmd
}

func (a *app) sandboxRegisterCommand() *cobra.Command {
	var name string
	var force bool
	cmd := &cobra.Command{
		Use:   "register [--name NAME]",
		Short: "Register this machine and redeem its join key",
		Long: `Register this machine as a sandbox of your organization, redeem its single-use
network-join key at once, and remember the sandbox in the profile. A profile
that already has a sandbox keeps it unless --force registers a new one.`,
		Args: args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			if s.ownSandbox && !force {
				a.say("This machine is already registered as %s (%s) in profile %q; --force registers it anew.", s.profile.Sandbox, s.profile.SandboxName, s.name)
				sb, err := s.client.GetSandbox(ctx, s.profile.Sandbox)
				if err != nil {
					return err
				}
				return a.printSandbox(sb)
			}
			sb, err := a.registerSandbox(ctx, s, name)
			if err != nil {
				return err
			}
			return a.printSandbox(sb)
		}),
	}
	cmd.Flags().StringVar(&name, "name", "", "the sandbox's name (default: the host name)")
	cmd.Flags().BoolVar(&force, "force", false, "register anew even if the profile has a sandbox")
	return cmd
}

// registerSandbox registers this machine as a sandbox named name (default:
// the host name), redeems its join key at once, and remembers it in the
// profile when the profile is for the API in use; s then leases with it.
func (a *app) registerSandbox(ctx context.Context, s *session, name string) (domain.Sandbox, error) {
	host, _ := os.Hostname()
	if name == "" {
		name = host
	}
	if name == "" {
		return domain.Sandbox{}, usagef("this machine has no host name: give --name")
	}
	reg, err := s.client.RegisterSandbox(ctx, client.SandboxRegistration{Name: name, Hostname: host})
	if err != nil {
		return domain.Sandbox{}, err
	}
	// The join key is shown only in that answer: redeem it now, before
	// anything else can lose it.
	sb, err := s.client.JoinSandbox(ctx, reg.JoinKey)
	if err != nil {
		return domain.Sandbox{}, fmt.Errorf("redeeming the join key of %s: %w", reg.Sandbox.ID, err)
	}
	if !s.profileAPI {
		// The profile is another API's: its sandbox would not be this one.
		a.say("Registered this machine as sandbox %s (%s) at %s; not saved in profile %q, which is for %s.", sb.ID, sb.Name, s.client.BaseURL(), s.name, orDash(s.profile.URL))
		return sb, nil
	}
	if err := updateProfile(s.name, func(_ *Config, p *Profile) { p.Sandbox, p.SandboxName = sb.ID, sb.Name }); err != nil {
		return sb, fmt.Errorf("sandbox %s registered, but saving it in profile %q failed: %w", sb.ID, s.name, err)
	}
	s.profile.Sandbox, s.profile.SandboxName, s.ownSandbox = sb.ID, sb.Name, true
	a.say("Registered this machine as sandbox %s (%s); profile %q leases with it.", sb.ID, sb.Name, s.name)
	return sb, nil
}

func (a *app) sandboxListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your organization's sandboxes",
		Args:    args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			list, err := s.client.ListSandboxes(ctx)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(map[string]any{"sandboxes": list})
			}
			now := time.Now()
			t := newTable(a.stdout, "ID", "NAME", "HOSTNAME", "CREATED BY", "CREATED", "JOINED")
			for _, sb := range list {
				id := sb.ID
				if s.ownSandbox && sb.ID == s.profile.Sandbox {
					id += " *"
				}
				t.row(id, sb.Name, orDash(sb.Hostname), sb.CreatedBy, ago(sb.Created, now), agoPtr(sb.Joined, now))
			}
			return t.flush()
		}),
	}
}

func (a *app) sandboxGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get [ID]",
		Short: "Show a sandbox (default: this machine's)",
		Args: func(cmd *cobra.Command, got []string) error {
			if len(got) > 1 {
				return usagef("usage: %s", cmd.UseLine())
			}
			return nil
		},
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			id := s.profile.Sandbox
			if len(got) == 1 {
				id = got[0]
			} else if !s.ownSandbox {
				return usagef("profile %q has no sandbox: give an ID, or run 'envlease sandbox register'", s.name)
			}
			sb, err := s.client.GetSandbox(ctx, id)
			if err != nil {
				return err
			}
			return a.printSandbox(sb)
		}),
	}
}

func (a *app) printSandbox(sb domain.Sandbox) error {
	if a.json() {
		return a.printJSON(sb)
	}
	now := time.Now()
	return details(a.stdout,
		"ID", sb.ID, "NAME", sb.Name, "HOSTNAME", sb.Hostname, "CREATED BY", sb.CreatedBy,
		"CREATED", ago(sb.Created, now), "JOINED", agoPtr(sb.Joined, now), "JOIN KEY", sb.JoinKeyPrefix+"…")
}
