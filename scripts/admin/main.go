// Command admin manages an envlease deployment's table directly, with the
// caller's AWS credentials: it applies organization configuration and
// bootstraps the first admin token. The table is named by TABLE_NAME and the
// endpoint by the SDK's own settings (AWS_ENDPOINT_URL… for LocalStack).
//
//	admin apply [--prune] FILE
//	admin bootstrap --org ID --user ID [--name NAME]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/fixture"
	"github.com/envlease/envlease/shared/keys"
	"github.com/envlease/envlease/shared/platform"
	"github.com/envlease/envlease/shared/store"
)

const usage = `usage:
  admin apply [--prune] FILE                   write orgs, users, pools, templates and quotas;
                                               list what the file no longer has (--prune: remove it)
  admin bootstrap --org ID --user ID [--name N] create an org admin and print its first token

The table comes from TABLE_NAME; AWS credentials, region and endpoint from the
SDK's usual settings (AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL, ...).
`

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "admin:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	cfg, err := platform.LoadConfig()
	if err != nil {
		return err
	}
	awsCfg, err := platform.AWSConfig(ctx)
	if err != nil {
		return err
	}
	st := store.New(dynamodb.NewFromConfig(awsCfg), cfg.Table)
	switch args[0] {
	case "apply":
		return apply(ctx, st, args[1:], out)
	case "bootstrap":
		return bootstrap(ctx, st, args[1:], out)
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

func apply(ctx context.Context, st *store.Store, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("apply", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	prune := fs.Bool("prune", false, "remove the users and templates the file no longer lists")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w\n%s", err, usage)
	}
	if fs.NArg() != 1 {
		return errors.New(usage)
	}
	f, err := fixture.Load(fs.Arg(0))
	if err != nil {
		return err
	}
	now := clock.System{}.Now()
	// Plain tokens in a file are for the local stack only; a deployment gets
	// its tokens from bootstrap and the API.
	if err := fixture.Apply(ctx, st, f, fixture.Options{WithTokens: false, Now: now}); err != nil {
		return err
	}
	for _, o := range f.Orgs {
		fmt.Fprintf(out, "applied org %s: %d users, %d templates, pools %v\n", o.ID, len(o.Users), len(o.Templates), o.Pools)
	}
	left, err := fixture.FindLeftovers(ctx, st, f)
	if err != nil {
		return err
	}
	verb := "would remove"
	if *prune {
		verb = "removed"
		if left, err = fixture.Prune(ctx, st, left, now); err != nil {
			printLeftovers(out, verb, left)
			return err
		}
	}
	if printLeftovers(out, verb, left) > 0 && !*prune {
		fmt.Fprintln(out, "nothing was removed; apply --prune FILE removes them")
	}
	return nil
}

// printLeftovers lists what was, or would be, removed, and counts it.
func printLeftovers(out io.Writer, verb string, left []fixture.Leftovers) int {
	n := 0
	for _, l := range left {
		for _, u := range l.Users {
			tokens := plural(u.Tokens, "token")
			if verb == "removed" {
				tokens += " revoked"
			}
			fmt.Fprintf(out, "org %s: %s user %s (%s)\n", l.Org, verb, u.ID, tokens)
			n++
		}
		for _, t := range l.Templates {
			live := ""
			switch {
			case t.Live == 1:
				live = " (1 live environment runs to its end)"
			case t.Live > 1:
				live = fmt.Sprintf(" (%d live environments run to their end)", t.Live)
			}
			fmt.Fprintf(out, "org %s: %s template %s%s\n", l.Org, verb, t.Name, live)
			n++
		}
	}
	return n
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func bootstrap(ctx context.Context, st *store.Store, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bootstrap", flag.ContinueOnError)
	org := fs.String("org", "", "organization id")
	user := fs.String("user", "", "user id of the admin")
	name := fs.String("name", "bootstrap", "name of the token")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *org == "" || *user == "" {
		return errors.New("bootstrap needs --org and --user")
	}
	// The same rule as apply: an id bootstrap let in, apply could not manage.
	if err := fixture.ValidateID("org", *org); err != nil {
		return err
	}
	if err := fixture.ValidateID("user", *user); err != nil {
		return err
	}
	if _, err := st.GetOrg(ctx, *org); domain.ErrorCode(err) == domain.CodeNotFound {
		if err := st.PutOrg(ctx, domain.Org{ID: *org, Name: *org, Pools: []string{}}); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if err := st.PutUser(ctx, domain.User{OrgID: *org, ID: *user, Role: domain.RoleAdmin}); err != nil {
		return err
	}
	svc := keys.NewService(st, clock.System{})
	issued, err := svc.CreateToken(ctx, domain.Principal{OrgID: *org, UserID: *user, Role: domain.RoleAdmin}, *name, "cli")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "admin %s of %s created; key %s\n", *user, *org, issued.APIKey.ID)
	fmt.Fprintln(out, "token (shown once, store it now):")
	fmt.Fprintln(out, issued.Token)
	return nil
}
