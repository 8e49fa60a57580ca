package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/tunnel"
)

// defaultWait bounds `lease --wait` when --timeout is not given.
const defaultWait = 5 * time.Minute

// unheldWaitPause paces the waits for ready only against a service that
// answers them at once without holding them.
const unheldWaitPause = 500 * time.Millisecond

func (a *app) leaseCommand() *cobra.Command {
	var (
		req        client.LeaseRequest
		labelArgs  []string
		wait       bool
		forward    bool
		noSandbox  bool
		sandboxArg string
		shareArgs  []string
		excludes   []string
		noIgnore   bool
	)
	cmd := &cobra.Command{
		Use:   "lease --template T [--share NAME=DIR]... [--label K=V]... [--idle D] [--hard D] [--name N]",
		Short: "Lease an environment from a template",
		Long: `Lease an environment from a template. It starts pending and becomes ready
once a node of its pool runs it; --wait waits for that (up to --timeout, 5
minutes by default; running out is exit code 6).

Leases name the profile's sandbox (see 'envlease sandbox register'), so the
environment's exports get listen addresses on this machine. Beyond the
template's quota the lease is refused with exit code 5.

--forward waits as --wait does, then carries the exports' listen addresses on
this machine to the environment (as 'envlease port-forward' does) until
Ctrl-C; the environment runs on afterwards. Without it the addresses answer
only while 'envlease port-forward ID' runs.

--share NAME=DIR sends the files of the local folder DIR into the template's
share NAME: they are packed (the share's exclude patterns and --exclude
applied; regular files, folders and symbolic links that stay inside; .git
and what the folder's .gitignore and .envleaseignore files match left out,
unless --no-ignore) into a
tar.zst, uploaded as an artifact that expires an hour after the lease's hard
timeout, and unpacked at the share's path before the command starts.

The lease carries a fresh Idempotency-Key, so a lease retried after the
service answered 502 or 503 never leases twice.`,
		Example: `  envlease lease --template shell
  envlease lease --template shell --share src=. --exclude node_modules --wait
  envlease lease --template shell --label team=web --label pr=42 --idle 15m --wait
  envlease lease --template shell --forward
  ID=$(envlease lease --template shell --wait -q)`,
		Args: args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			var err error
			if req.Labels, err = parseLabels(labelArgs); err != nil {
				return err
			}
			shares, err := parseShares(shareArgs)
			if err != nil {
				return err
			}
			if err := checkTimeouts(req.Idle, req.Hard); err != nil {
				return err
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			switch {
			case sandboxArg != "":
				req.Sandbox = sandboxArg
			case s.ownSandbox && !noSandbox:
				req.Sandbox = s.profile.Sandbox
			}
			if len(shares) > 0 {
				t, err := findTemplate(ctx, s.client, req.Template)
				if err != nil {
					return err
				}
				if req.Shares, err = a.uploadShares(ctx, s.client, t, req.Hard, shares, excludes, noIgnore); err != nil {
					return err
				}
			}
			req.IdempotencyKey = newIdempotencyKey()
			leased, err := s.client.Lease(ctx, req)
			if err != nil {
				return templateHint(ctx, s.client, req.Template, err)
			}
			env := leased.Environment
			if wait || forward {
				a.say("Leased %s; waiting for it to be ready…", env.ID)
				if env, err = a.waitReady(ctx, s.client, env, nil); err != nil {
					return err
				}
			}
			if forward {
				return a.leaseAndForward(ctx, s, env)
			}
			if a.json() {
				leased.Environment = env
				return a.printJSON(leased)
			}
			return a.printEnvironment(env)
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&req.Template, "template", "t", "", "the template to lease from (required)")
	f.StringArrayVarP(&labelArgs, "label", "l", nil, "a label KEY=VALUE (repeatable)")
	f.StringArrayVar(&shareArgs, "share", nil, "send the files of the local folder DIR into the template's share NAME, as NAME=DIR (repeatable)")
	f.StringArrayVar(&excludes, "exclude", nil, "leave out of every --share what matches this pattern, besides the template's excludes (repeatable)")
	f.BoolVar(&noIgnore, "no-ignore", false, "send .git and what .gitignore and .envleaseignore files match too")
	f.StringVar(&req.Idle, "idle", "", "idle timeout, such as 15m (default and upper bound: the template's)")
	f.StringVar(&req.Hard, "hard", "", "hard timeout, such as 2h (default and upper bound: the template's)")
	f.StringVar(&req.Name, "name", "", "the environment's name (default: the template's)")
	f.StringVar(&req.Project, "project", "", "a project reference")
	f.StringVar(&req.Pool, "pool", "", "the pool to run in (default: the template's first)")
	f.StringVar(&req.Snapshot, "snapshot", "", "an artifact id to restore the environment from")
	f.StringVar(&sandboxArg, "sandbox", "", "the sandbox to forward exports to (default: the profile's)")
	f.BoolVar(&noSandbox, "no-sandbox", false, "lease without a sandbox")
	f.BoolVarP(&wait, "wait", "w", false, "wait until the environment is ready")
	f.BoolVar(&forward, "forward", false, "wait until ready, then forward its exports to this machine until Ctrl-C (as port-forward does); the environment runs on")
	f.BoolVarP(&a.quiet, "quiet", "q", false, "print only the environment's id")
	_ = cmd.MarkFlagRequired("template")
	_ = cmd.RegisterFlagCompletionFunc("template", a.completeTemplates)
	return cmd
}

// checkTimeouts checks --idle and --hard before anything is sent; the
// service checks them against the template's.
func checkTimeouts(idle, hard string) error {
	for _, f := range []struct{ flag, v string }{{"--idle", idle}, {"--hard", hard}} {
		if f.v == "" {
			continue
		}
		if d, err := domain.ParseDuration(f.v); err != nil || d <= 0 {
			return usagef("%s %q: want a positive duration such as 30m or 6h", f.flag, f.v)
		}
	}
	return nil
}

// parseLabels reads KEY=VALUE pairs; the service checks the label rules.
func parseLabels(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usagef("--label %q: want KEY=VALUE", p)
		}
		if _, dup := out[k]; dup {
			return nil, usagef("--label %q: %s given twice", p, k)
		}
		out[k] = v
	}
	return out, nil
}

// newIdempotencyKey is a key no other lease uses.
func newIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand never fails on supported platforms
	return "envlease-cli-" + hex.EncodeToString(b)
}

// waitReady waits until the environment is ready, failed or ended, or the
// wait runs out (--timeout, or defaultWait without one). Each wait is one
// request the service holds until the state changes (up to
// client.MaxWait), so nothing here sleeps. changed, when set, is told every
// state the environment is read in that differs from the one before.
func (a *app) waitReady(ctx context.Context, c *client.Client, env domain.Environment, changed func(domain.Environment)) (domain.Environment, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultWait)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	for {
		switch env.State {
		case domain.StateReady:
			return env, nil
		case domain.StateFailed:
			return env, fmt.Errorf("%s failed: %s", env.ID, env.Error)
		case domain.StateStopping, domain.StateStopped:
			return env, fmt.Errorf("%s ended before it was ready (%s)", env.ID, orDash(env.StopReason))
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return env, ctx.Err()
			}
			return env, fmt.Errorf("%w waiting for %s to be ready; it is %s", errTimedOut, env.ID, env.State)
		}
		asked := time.Now()
		next, err := c.WaitReady(ctx, env.ID, min(left, client.MaxWait))
		if err != nil {
			if ctx.Err() != nil {
				continue // said by the checks above
			}
			return env, err
		}
		if next.State == env.State && time.Since(asked) < min(left, client.MaxWait)/2 {
			// A service that answers at once without a change does not
			// hold waits (an older one): do not ask it in a tight loop.
			select {
			case <-ctx.Done():
			case <-time.After(unheldWaitPause):
			}
		}
		if changed != nil && next.State != env.State {
			changed(next)
		}
		env = next
	}
}

// leaseAndForward prints the ready environment, then forwards its exports
// until Ctrl-C, which ends forwarding, not the lease.
func (a *app) leaseAndForward(ctx context.Context, s *session, env domain.Environment) error {
	forwarding := len(env.Exports) > 0 && env.Sandbox != ""
	if a.json() {
		// One object on standard output, as every -o json prints: when
		// its exports are forwarded, it is printed once they are.
		if !forwarding {
			if err := a.printJSON(client.Leased{Environment: env}); err != nil {
				return err
			}
		}
	} else if a.quiet {
		fmt.Fprintln(a.stdout, env.ID)
	} else if err := details(a.stdout, "ID", env.ID, "TEMPLATE", env.Template, "STATE", string(env.State)); err != nil {
		return err
	}
	if len(env.Exports) == 0 {
		a.say("%s has no exports to forward.", env.ID)
		return nil
	}
	if env.Sandbox == "" {
		return fmt.Errorf("%s was leased without a sandbox, so its exports have no address on this machine: lease without --no-sandbox", env.ID)
	}
	err := tunnel.Forward(ctx, s.client, env.ID, a.forwardEvent(env.ID, func([]domain.EnvExport) error {
		return a.printJSON(client.Leased{Environment: env})
	}), tunnel.Options{})
	if errors.Is(err, context.Canceled) {
		a.say("Stopped forwarding; %s runs on ('envlease rm %s' deletes it).", env.ID, env.ID)
		return nil
	}
	return err
}
