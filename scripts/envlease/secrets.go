package main

import (
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/domain"
)

func (a *app) secretsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "secrets",
		Aliases: []string{"secret"},
		Short:   "Organization secrets, added at the network boundary, never inside an environment",
		Long: `A template binds a secret to hosts; the network boundary of its environments
adds it to their HTTPS requests to those hosts, so the environment never holds
it. Values are write-only: no command shows one. Setting and removing are an
admin's (scope secrets:write). See docs/secrets.md.`,
	}
	cmd.AddCommand(a.secretsSetCommand(), a.secretsListCommand(), a.secretsRemoveCommand())
	return cmd
}

// maxSecretInput bounds what set reads: a little over the largest value.
const maxSecretInput = domain.MaxSecretValue + 2

func (a *app) secretsSetCommand() *cobra.Command {
	var fromFile string
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "Set a secret from standard input or a file (never an argument, which ps would show)",
		Example: `  printf '%s' "$GITHUB_TOKEN" | envlease secrets set GITHUB_TOKEN
  envlease secrets set REGISTRY_PASSWORD --from-file ./password.txt`,
		Args: args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			var r io.Reader = a.stdin
			if fromFile != "" {
				f, err := os.Open(fromFile)
				if err != nil {
					return usagef("--from-file: %v", err)
				}
				defer f.Close()
				r = f
			}
			b, err := io.ReadAll(io.LimitReader(r, maxSecretInput+1))
			if err != nil {
				return err
			}
			// One trailing newline (echo, a file's last line) is not part
			// of the value.
			v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
			if v == "" {
				return usagef("no value: give it on standard input or with --from-file")
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			sec, err := s.client.SetSecret(ctx, got[0], v)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(map[string]any{"secret": sec})
			}
			a.say("Set secret %s (%d bytes).", sec.Name, sec.Size)
			return nil
		}),
	}
	cmd.Flags().StringVar(&fromFile, "from-file", "", "read the value from this file instead of standard input")
	return cmd
}

func (a *app) secretsListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the secrets: names, who set them, when, which templates bind them",
		Args:    args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			ss, err := s.client.ListSecrets(ctx)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(map[string]any{"secrets": ss})
			}
			now := time.Now()
			t := newTable(a.stdout, "NAME", "SET BY", "SET", "SIZE", "TEMPLATES")
			for _, x := range ss {
				t.row(x.Name, x.SetBy, ago(x.Set, now), strconv.Itoa(x.Size), strings.Join(x.Templates, ","))
			}
			return t.flush()
		}),
	}
}

func (a *app) secretsRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"remove"},
		Short:   "Delete a secret (templates that bind it refuse leases until it is set again)",
		Args:    args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			if err := s.client.DeleteSecret(ctx, got[0]); err != nil {
				return err
			}
			a.say("Deleted secret %s.", got[0])
			return nil
		}),
	}
}
