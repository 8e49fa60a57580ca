package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/tunnel"
)

// stopGrace is how long the command has to end after envlease passed it a
// signal (or SIGTERM, when the environment ended) before it is killed.
const stopGrace = 10 * time.Second

// maxCheckEvery bounds how long an environment that ended under the
// command (deleted elsewhere, timed out) goes unnoticed.
const maxCheckEvery = 5 * time.Second

// releaseWait bounds the delete at the end, which runs after an interrupt too.
const releaseWait = 30 * time.Second

// runOptions are the flags of `envlease run`.
type runOptions struct {
	template, name, idle, hard string
	shares, excludes, labels   []string
	noIgnore                   bool
	// allow and deny narrow the template's network policy (--allow, --deny).
	allow, deny []string
}

func (a *app) runCommand() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run [--template T] [--share NAME=DIR]... [--label K=V]... [--idle D] [--hard D] -- CMD [ARG...]",
		Short: "Run a local command against a fresh environment, then delete it",
		Long: `Lease an environment, run CMD on this machine while it is ready, and delete
the environment when CMD ends, however it ends (Ctrl-C and SIGTERM too).

In order: register this machine as a sandbox if the profile has none; send
every --share folder (as 'lease --share' does); lease with an
Idempotency-Key, so a retried lease leases once; wait until the environment
is ready, saying on standard error how it goes and, if it fails, why; forward
its exports (as port-forward does); run CMD with standard input, output and error passed through,
and in its environment

  ENVLEASE_ENV=<environment id>
  ENVLEASE_<SERVICE>=<listen host:port>   one per export, the service
                                          upper-cased, other characters '_'

While CMD runs the environment is touched every third of its idle timeout
(at most a minute apart). If it ends anyway (its hard timeout, deleted
elsewhere) CMD gets SIGTERM (SIGKILL 10 s later), envlease says why and
exits with 4. A signal envlease gets is passed on to CMD; envlease then exits
with 130. Otherwise envlease exits with CMD's exit code. Failures before CMD
runs use the usual exit codes ('envlease help exit-codes').

--template may be left out when the organization has one template.`,
		Example: `  envlease run --template shell --share src=. -- make integration-test
  envlease run -t shell -- sh -c 'curl -fsS "http://$ENVLEASE_WEB/"'`,
		Args: func(cmd *cobra.Command, got []string) error {
			if cmd.ArgsLenAtDash() != 0 || len(got) == 0 {
				return usagef("give the command after --: %s", cmd.UseLine())
			}
			return nil
		},
		RunE: a.runE(func(ctx context.Context, _ *cobra.Command, argv []string) error {
			return a.runWith(ctx, o, argv)
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&o.template, "template", "t", "", "the template to lease from (default: the organization's only one)")
	f.StringArrayVar(&o.shares, "share", nil, "send the files of the local folder DIR into the template's share NAME, as NAME=DIR (repeatable)")
	f.StringArrayVar(&o.excludes, "exclude", nil, "leave out of every --share what matches this pattern, besides the template's excludes (repeatable)")
	f.BoolVar(&o.noIgnore, "no-ignore", false, "send .git and what .gitignore and .envleaseignore files match too")
	f.StringArrayVarP(&o.labels, "label", "l", nil, "a label KEY=VALUE (repeatable)")
	f.StringVar(&o.idle, "idle", "", "idle timeout, such as 15m (default and upper bound: the template's)")
	f.StringVar(&o.hard, "hard", "", "hard timeout, such as 2h (default and upper bound: the template's)")
	f.StringVar(&o.name, "name", "", "the environment's name (default: the template's)")
	f.StringArrayVar(&o.allow, "allow", nil, "reach only what this network entry names (a domain, *.domain, address or CIDR, with an optional :PORT), within the template's network policy (repeatable)")
	f.StringArrayVar(&o.deny, "deny", nil, "never reach what this network entry names (repeatable)")
	_ = cmd.RegisterFlagCompletionFunc("template", a.completeTemplates)
	return cmd
}

func (a *app) runWith(ctx context.Context, o runOptions, argv []string) error {
	labels, err := parseLabels(o.labels)
	if err != nil {
		return err
	}
	shares, err := parseShares(o.shares)
	if err != nil {
		return err
	}
	if err := checkTimeouts(o.idle, o.hard); err != nil {
		return err
	}
	// The root's context ends on SIGINT and SIGTERM; this channel says which
	// came, so the command gets the same.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	s, err := a.session()
	if err != nil {
		return err
	}
	markStep("session")
	sandbox := s.profile.Sandbox
	if !s.ownSandbox {
		a.say("Profile %q has no sandbox: registering this machine.", s.name)
		sb, err := a.registerSandbox(ctx, s, "")
		if err != nil {
			return err
		}
		sandbox = sb.ID
	}
	req := client.LeaseRequest{Template: o.template, Name: o.name, Labels: labels, Sandbox: sandbox, Idle: o.idle, Hard: o.hard}
	if len(o.allow) > 0 || len(o.deny) > 0 {
		req.Network = &domain.EnvNetwork{Allow: o.allow, Deny: o.deny}
	}
	// The template is read only when the lease needs it: to pick the only
	// one, or for the shares' excludes. A named template the organization
	// lacks is refused by the lease itself.
	if o.template == "" || len(shares) > 0 {
		t, err := findTemplate(ctx, s.client, o.template)
		if err != nil {
			return err
		}
		markStep("template")
		req.Template = t.Name
		if req.Shares, err = a.uploadShares(ctx, s.client, t, o.hard, shares, o.excludes, o.noIgnore); err != nil {
			return err
		}
	}
	req.IdempotencyKey = newIdempotencyKey()
	leased, err := s.client.Lease(ctx, req)
	if err != nil {
		return templateHint(ctx, s.client, req.Template, err)
	}
	markStep("lease")
	env := leased.Environment
	defer a.release(ctx, s.client, env)
	return a.runIn(ctx, s.client, env, argv, sigs)
}

// runIn waits for the leased environment, forwards its exports and runs the
// command; the caller deletes the environment whatever happens.
func (a *app) runIn(ctx context.Context, c *client.Client, env domain.Environment, argv []string, sigs <-chan os.Signal) error {
	leasedAt := time.Now()
	a.say("Leased %s (%s); waiting for it to be ready: %s", env.ID, env.Template, env.State)
	env, err := a.waitReady(ctx, c, env, func(e domain.Environment) {
		if e.State.Live() && e.State != domain.StateReady {
			a.say("  %s is %s", e.ID, e.State) // ready and the ends have lines of their own
		}
	})
	if err != nil {
		a.sayFailedLog(ctx, c, env)
		return err
	}
	markStep("wait")
	a.say("%s is ready (%s after the lease).", env.ID, time.Since(leasedAt).Round(time.Millisecond))
	stopForwarding, err := a.forwardExports(ctx, c, env)
	if err != nil {
		return err
	}
	defer stopForwarding()
	return a.runLocal(ctx, c, env, argv, sigs)
}

// forwardExports makes each export's listen address on this machine carry
// connections to its target on the node (tunnel.Forward, as port-forward
// does), and returns once every listener is open and the tunnel is up, so
// the command can connect at once. Forwarding outlives an interrupt until
// stop: the command is stopped first and may still be talking to the
// environment. A tunnel that drops is redialled by Forward; one that ends
// for good is said, and the environment check tells whether it ended.
func (a *app) forwardExports(ctx context.Context, c *client.Client, env domain.Environment) (stop func(), err error) {
	if len(env.Exports) == 0 {
		return func() {}, nil
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	up := make(chan struct{})
	var upOnce sync.Once
	done := make(chan error, 1)
	go func() {
		done <- tunnel.Forward(fctx, &readyAPI{Client: c, env: env}, env.ID, func(e tunnel.Event) {
			switch e.Kind {
			case tunnel.Listening:
				a.say("  %s -> %s (%s)", e.Listen, e.Service, e.Target)
			case tunnel.Forwarding:
				upOnce.Do(func() { markStep("dial"); close(up) })
			case tunnel.Retrying:
				a.say("tunnel to %s: %v; trying again", env.ID, e.Err)
			case tunnel.StreamFailed:
				a.say("%s: a connection to %s was not forwarded: %v", e.Listen, e.Service, e.Err)
			}
		}, tunnel.Options{})
	}()
	select {
	case <-up:
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("forward the exports of %s: %w", env.ID, err)
	case <-ctx.Done():
		cancel()
		<-done
		return nil, ctx.Err()
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		if err := <-done; fctx.Err() == nil {
			a.say("envlease: the exports of %s are no longer forwarded: %v", env.ID, err)
		}
	}()
	return func() {
		cancel()
		<-finished
	}, nil
}

// commandEnv is what the command gets besides this process's environment.
func commandEnv(env domain.Environment) []string {
	out := []string{"ENVLEASE_ENV=" + env.ID}
	for _, e := range env.Exports {
		out = append(out, exportVar(e.Service)+"="+e.Listen)
	}
	return out
}

// exportVar is ENVLEASE_<SERVICE>: the service upper-cased, anything but
// letters and digits as '_' (the agent names its port variables alike).
func exportVar(service string) string {
	var b strings.Builder
	b.WriteString("ENVLEASE_")
	for _, r := range strings.ToUpper(service) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// runLocal runs the command until it exits, touching the environment while
// it runs. It returns the command's exit code as a commandExit (nil for 0),
// or why envlease stopped the command: a signal (context.Canceled, 130),
// --timeout (6), the environment ending under it (4).
func (a *app) runLocal(ctx context.Context, c *client.Client, env domain.Environment, argv []string, sigs <-chan os.Signal) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr
	// exec keeps the last of duplicate keys: ours win over an outer run's.
	cmd.Env = append(os.Environ(), commandEnv(env)...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", argv[0], err)
	}
	markStep("command-start")
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit status is read from ProcessState
		markStep("command-exit")
		close(exited)
	}()
	// API calls made while the command runs must outlive an interrupt: the
	// command is stopped first, and only its end ends them.
	api := context.WithoutCancel(ctx)
	w := watcher{a: a, c: c, env: env, every: touchEvery(env.Idle.Std()), touched: time.Now()}
	tick := time.NewTicker(min(w.every, maxCheckEvery))
	defer tick.Stop()
	var deadline <-chan time.Time
	if d, ok := ctx.Deadline(); ok {
		t := time.NewTimer(time.Until(d))
		defer t.Stop()
		deadline = t.C
	}
	var (
		outcome error
		kill    <-chan time.Time
	)
	stop := func(sig os.Signal, why error) {
		if outcome == nil {
			outcome = why
		}
		_ = cmd.Process.Signal(sig)
		if kill == nil {
			kill = time.After(stopGrace)
		}
	}
	for {
		select {
		case <-exited:
			if outcome != nil {
				return outcome
			}
			if code := exitStatus(cmd.ProcessState); code != 0 {
				return &commandExit{code: code}
			}
			return nil
		case sig := <-sigs:
			if errors.Is(outcome, context.Canceled) {
				_ = cmd.Process.Kill() // a second interrupt: no more waiting
				continue
			}
			stop(sig, context.Canceled)
		case <-kill:
			_ = cmd.Process.Kill()
			kill = nil
		case <-deadline:
			deadline = nil
			stop(syscall.SIGTERM, &codedError{code: exitTimeout, err: errors.New("--timeout passed while the command ran; it was stopped")})
		case <-tick.C:
			if why := w.check(api); why != "" && outcome == nil {
				a.say("%s ended (%s); stopping the command.", env.ID, why)
				stop(syscall.SIGTERM, &codedError{code: exitNotFound, err: fmt.Errorf("%s ended while the command ran: %s", env.ID, why)})
			}
		}
	}
}

// exitStatus is a finished process's exit code, 128 + the signal's number
// when a signal ended it (as shells report it).
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// touchEvery is min(idle/3, 1 min): three touches fit in the idle timeout,
// so one lost touch never lets the environment go idle.
func touchEvery(idle time.Duration) time.Duration {
	every := min(idle/3, time.Minute)
	return max(every, time.Second)
}

// watcher keeps the environment alive while the command runs and notices
// when it ends anyway.
type watcher struct {
	a       *app
	c       *client.Client
	env     domain.Environment
	every   time.Duration
	touched time.Time
	// warned is set once a failing call was reported, so a network outage
	// does not fill the command's terminal.
	warned bool
}

// check touches the environment when a touch is due and reads it otherwise;
// it returns why the environment ended, or "" while it runs. A call that
// fails for another reason is reported once and tried again next time: the
// command is not stopped for a passing outage.
func (w *watcher) check(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, maxCheckEvery)
	defer cancel()
	var (
		e   domain.Environment
		err error
	)
	if time.Since(w.touched) >= w.every || !time.Now().Before(w.env.Expires) {
		if e, err = w.c.TouchEnvironment(ctx, w.env.ID); err == nil {
			w.touched = time.Now()
		}
	} else {
		e, err = w.c.GetEnvironment(ctx, w.env.ID)
	}
	if ce, ok := client.AsError(err); ok && (ce.Status == 410 || ce.Status == 404) {
		// Touch says gone for an environment past its deadline that the
		// timeout job has not stopped yet: read it for the reason.
		if e, err = w.c.GetEnvironment(ctx, w.env.ID); err != nil {
			return ce.Message
		}
		if e.State == domain.StateReady {
			if !time.Now().Before(e.Expires) {
				return fmt.Sprintf("its hard timeout (%s) passed", e.Hard)
			}
			return fmt.Sprintf("its idle deadline passed (%s idle) before a touch reached it", e.Idle)
		}
	}
	if err != nil {
		if !w.warned {
			w.warned = true
			w.a.say("envlease: could not touch %s (trying again): %v", w.env.ID, err)
		}
		return ""
	}
	w.warned = false
	if e.State == domain.StateReady {
		return ""
	}
	return endedWhy(e)
}

// endedWhy says in words why an environment is no longer ready.
func endedWhy(e domain.Environment) string {
	switch e.StopReason {
	case domain.StopHard:
		return fmt.Sprintf("its hard timeout (%s) passed", e.Hard)
	case domain.StopIdle:
		return fmt.Sprintf("it was idle for %s", e.Idle)
	case domain.StopDeleted:
		return "it was deleted"
	case domain.StopBudget:
		return "a hard budget it counts against was spent"
	case domain.StopNodeLost, domain.StopNodeLeft, domain.StopNodeRevoked:
		return fmt.Sprintf("its node was lost (%s)", e.StopReason)
	}
	if e.Error != "" {
		return fmt.Sprintf("it %s: %s", e.State, e.Error)
	}
	return fmt.Sprintf("it is %s (%s)", e.State, orDash(e.StopReason))
}

// release deletes the environment at the end of a run, whatever ended it; an
// interrupt does not stop the delete.
func (a *app) release(ctx context.Context, c *client.Client, env domain.Environment) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseWait)
	defer cancel()
	e, err := c.DeleteEnvironment(ctx, env.ID)
	markStep("release")
	switch {
	case err != nil:
		a.say("envlease: %s was not deleted: %v; it stops after %s idle, or run 'envlease rm %s'", env.ID, err, env.Idle, env.ID)
	case e.StopReason == domain.StopDeleted:
		a.say("Deleted %s (%s).", e.ID, e.State)
	default:
		a.say("%s had ended already (%s).", e.ID, e.State)
	}
}
