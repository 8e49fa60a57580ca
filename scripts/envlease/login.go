package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/envlease/envlease/shared/client"
)

func (a *app) loginCommand() *cobra.Command {
	var url string
	var setDefault bool
	cmd := &cobra.Command{
		Use:   "login --url URL [--profile NAME]",
		Short: "Save an API URL and token in a profile",
		Long: `Save an API URL and a token in a profile of the configuration file
(os.UserConfigDir()/envlease/config.json, mode 0600).

The token is read from standard input when it is not a terminal, and asked
for without echo when it is; it is never taken as an argument, where other
users and the shell's history would see it. It is checked with an
authenticated call before it is saved.

The first profile saved becomes the default; --set-default makes this one
the default. Other commands use the default profile unless --profile (or
ENVLEASE_PROFILE) names another.`,
		Example: `  envlease login --url http://127.0.0.1:8080
  echo "$TOKEN" | envlease login --url https://api.example.com --profile work`,
		Args: args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			cfg, _, err := loadConfig()
			if err != nil {
				return err
			}
			name, err := a.profileName(cfg)
			if err != nil {
				return err
			}
			if url == "" {
				url = a.getenv("ENVLEASE_URL")
			}
			if url == "" && cfg.Profiles[name] != nil {
				url = cfg.Profiles[name].URL
			}
			if url == "" {
				return usagef("--url is required (the API's base URL, such as http://127.0.0.1:8080)")
			}
			var fixed string
			if url, fixed = withScheme("--url", url); fixed != "" {
				a.say("%s", fixed)
			}
			if _, err := client.ParseBaseURL(url); err != nil {
				return usagef("%v", err)
			}
			token, err := a.readToken()
			if err != nil {
				return err
			}
			c, err := a.newClient(url, token)
			if err != nil {
				return usagef("%v", err)
			}
			id, err := c.Whoami(ctx)
			if err != nil {
				return fmt.Errorf("checking the token at %s: %w", c.BaseURL(), err)
			}
			err = updateProfile(name, func(cfg *Config, p *Profile) {
				// A sandbox is registered at one API for one organization.
				if p.URL != c.BaseURL() || p.Organization != id.Organization {
					p.Sandbox, p.SandboxName = "", ""
				}
				p.URL, p.Token = c.BaseURL(), token
				p.Organization, p.User, p.KeyID = id.Organization, id.User, id.Key.ID
				if cfg.Default == "" || setDefault {
					cfg.Default = name
				}
			})
			if err != nil {
				return fmt.Errorf("saving profile %q: %w", name, err)
			}
			a.say("Logged in to %s as %s; saved as profile %q.", c.BaseURL(), describe(id), name)
			if a.json() {
				return a.printJSON(map[string]any{"profile": name, "url": c.BaseURL(), "identity": id})
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&url, "url", "", "the API's base URL (default: ENVLEASE_URL, or the profile's)")
	cmd.Flags().BoolVar(&setDefault, "set-default", false, "make this profile the default")
	return cmd
}

// maxToken bounds what is read as a token: tokens are about 50 characters.
const maxToken = 4096

// readToken reads the token from a pipe or file, or prompts for it without
// echo on a terminal.
func (a *app) readToken() (string, error) {
	var token string
	if f, ok := a.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(a.stderr, "Token: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.stderr)
		if err != nil {
			return "", fmt.Errorf("reading the token: %w", err)
		}
		token = string(b)
	} else {
		line, err := bufio.NewReader(io.LimitReader(a.stdin, maxToken)).ReadString('\n')
		if err != nil && err != io.EOF {
			return "", fmt.Errorf("reading the token from standard input: %w", err)
		}
		token = line
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", usagef("no token given: pipe it in (echo \"$TOKEN\" | envlease login --url URL) or type it at the prompt")
	}
	if strings.ContainsAny(token, " \t") {
		return "", usagef("the token has spaces in it; give the token alone")
	}
	return token, nil
}

// describe says who an identity is: "alice (admin) of acme" or
// "organization key \"ci\" (member) of acme".
func describe(id client.Identity) string {
	who := id.User
	if who == "" {
		who = fmt.Sprintf("organization key %q", id.Key.Name)
	}
	return fmt.Sprintf("%s (%s) of %s", who, id.Role, id.Organization)
}
