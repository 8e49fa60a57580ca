package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

func (a *app) getCommand() *cobra.Command {
	var showIdentity bool
	var token string
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show an environment, in any state",
		Long: `Show an environment, in any state.

With --identity, show instead the claims its identity tokens carry (docs/identity.md):
the issuer, and for each audience the token's file inside the environment and its
claims, never a token. With --token AUDIENCE, print that audience's token itself, as
the environment has it now (read inside it, as envlease exec would: the exec scope is
needed, and the template must allow exec).`,
		Args:              args(1),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			if token != "" {
				return a.execIn(ctx, got[0], tokenCommand(token), false, true)
			}
			if showIdentity {
				v, err := s.client.GetEnvironmentIdentity(ctx, got[0])
				if err != nil {
					return err
				}
				return a.printIdentity(v)
			}
			e, err := s.client.GetEnvironment(ctx, got[0])
			if err != nil {
				return err
			}
			return a.printEnvironment(e)
		}),
	}
	cmd.Flags().BoolVarP(&a.quiet, "quiet", "q", false, "print only the environment's id")
	cmd.Flags().BoolVar(&showIdentity, "identity", false, "show the claims of the environment's identity tokens (never a token)")
	cmd.Flags().StringVar(&token, "token", "", "print the environment's identity token for this audience (read inside it)")
	return cmd
}

// tokenCommand prints, inside an environment, its token for aud: from
// $ENVLEASE_IDENTITY_DIR where the command sees it (a process's folder),
// else the documented path.
func tokenCommand(aud string) []string {
	return []string{"sh", "-c", `cat "${ENVLEASE_IDENTITY_DIR:-` + domain.IdentityPath + `}/$1/token"`, "sh", domain.AudienceFolder(aud)}
}

// claimOrder is the order claims are shown in; any others follow, sorted.
var claimOrder = []string{"iss", "sub", "aud", "org", "template", "project", "labels", "environment", "pool", "leasedBy", "leasedByKind"}

func (a *app) printIdentity(v client.EnvironmentIdentity) error {
	if a.json() {
		return a.printJSON(v)
	}
	if err := details(a.stdout, "ISSUER", v.Issuer, "LIFETIME", v.Lifetime.String()+" (each token is replaced at 80% of it)"); err != nil {
		return err
	}
	for _, t := range v.Tokens {
		kv := []string{"AUDIENCE", t.Audience, "FILE", t.Path}
		seen := map[string]bool{"exp": true, "iat": true, "nbf": true, "jti": true}
		add := func(k string) {
			if val, ok := t.Claims[k]; ok && !seen[k] {
				seen[k] = true
				kv = append(kv, "  "+k, claimText(val))
			}
		}
		for _, k := range claimOrder {
			add(k)
		}
		rest := make([]string, 0, len(t.Claims))
		for k := range t.Claims {
			rest = append(rest, k)
		}
		sort.Strings(rest)
		for _, k := range rest {
			add(k)
		}
		if iat, ok1 := t.Claims["iat"].(float64); ok1 {
			if exp, ok2 := t.Claims["exp"].(float64); ok2 {
				kv = append(kv, "  exp", "iat + "+domain.Duration(time.Duration(exp-iat)*time.Second).String())
			}
		}
		fmt.Fprintln(a.stdout)
		if err := details(a.stdout, kv...); err != nil {
			return err
		}
	}
	return nil
}

// claimText shows a claim's value: a string as it is, labels as k=v, else JSON.
func claimText(v any) string {
	switch x := v.(type) {
	case string:
		if x == "" {
			return `""`
		}
		return x
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + fmt.Sprint(x[k])
		}
		if len(parts) == 0 {
			return "{}"
		}
		return strings.Join(parts, ",")
	}
	b, _ := json.Marshal(v)
	return string(b)
}
