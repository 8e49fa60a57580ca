package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/envlease/envlease/shared/execsession"
)

// shellCommand is what envlease shell runs: the environment's bash when it
// has one, else its sh, as a login shell.
var shellCommand = []string{"/bin/sh", "-c", `if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l`}

func (a *app) execCommand() *cobra.Command {
	var tty, noStdin bool
	c := &cobra.Command{
		Use:   "exec ID [-t] [-n] -- CMD [ARG...]",
		Short: "Run a command inside an environment",
		Long: `Run CMD inside a ready environment, in its namespaces, as its user, in its
folder, cgroup and limits, through the agent of the node that runs it. Standard
input goes to CMD (-n: none), its standard output and error come back as they are
written, and envlease exits with CMD's exit code (128 plus the signal's number when
a signal ended it). Ctrl-C and SIGTERM are passed on to CMD.

exec's flags go before or after the id (exec -n ID -- CMD, exec ID -n -- CMD);
everything after -- is CMD's. Without -- everything after the id is CMD's, so a
CMD with flags of its own and exec flags after the id need the --.

-t runs CMD in a pseudo-terminal (as envlease shell does): its output all comes on
standard output, and when standard input is a terminal it is put in raw mode, so
Ctrl-C reaches the terminal inside and window size changes are carried.

Each exec is recorded as an environment.exec event naming who ran it and CMD's
program, never its arguments. A template with exec: false refuses it (exit code 3).
While CMD runs the environment is touched, so it does not go idle.

Exit codes besides CMD's own: 1 when the environment is not ready or no longer
runs, the node could not start CMD, or the connection to it ended first; 3 when
exec is refused (exec: false: code exec_disabled); 4 when there is no such
environment; see 'envlease help exit-codes'.`,
		Example: "  envlease exec env_19cec2a0e00p4k7w1m9z3c5b -- make test\n" +
			"  echo hello | envlease exec env_19cec2a0e00p4k7w1m9z3c5b -- sh -c 'cat > /tmp/greeting'\n" +
			"  envlease exec env_19cec2a0e00p4k7w1m9z3c5b -t -- top",
		Args: func(cmd *cobra.Command, got []string) error {
			if _, err := execArgs(cmd.Flags(), got); err != nil {
				return usagef("%v; usage: %s", err, cmd.UseLine())
			}
			return nil
		},
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			argv, _ := execArgs(cmd.Flags(), got)
			return a.execIn(ctx, got[0], argv, tty, noStdin)
		}),
	}
	// Flags are read up to the environment's id; execArgs reads exec's
	// flags between the id and "--".
	c.Flags().SetInterspersed(false)
	c.Flags().BoolVarP(&tty, "tty", "t", false, "run CMD in a pseudo-terminal")
	c.Flags().BoolVarP(&noStdin, "no-stdin", "n", false, "give CMD no standard input")
	return c
}

// execArgs is CMD of exec's arguments (the environment's id first, as
// flags parsed up to it leave them), and reads exec's own flags given
// between the id and "--": exec's flags go before or after the id, as in
// kubectl exec, and everything after "--" is CMD's. Without "--" all that
// follows the id is CMD's, its flags included, as it always was.
func execArgs(flags *pflag.FlagSet, got []string) ([]string, error) {
	if len(got) == 0 {
		return nil, errors.New("give the environment's id, then -- and the command")
	}
	rest := got[1:]
	if dash := slices.Index(rest, "--"); dash >= 0 {
		between := rest[:dash]
		rest = rest[dash+1:]
		if len(between) > 0 {
			if err := flags.Parse(between); err != nil {
				return nil, err
			}
			if extra := flags.Args(); len(extra) > 0 {
				return nil, fmt.Errorf("only exec's flags go between the environment's id and --, not %q", strings.Join(extra, " "))
			}
		}
	}
	if len(rest) == 0 {
		return nil, errors.New("give the command to run after the environment's id and --")
	}
	return rest, nil
}

func (a *app) shellCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "shell ID",
		Short: "Open an interactive shell inside an environment",
		Long: `Open a login shell (bash when the environment has it, else sh) inside a ready
environment, in a pseudo-terminal, as 'envlease exec -t ID -- sh' does: the local
terminal is put in raw mode, so Ctrl-C, Ctrl-Z and the like reach the shell inside
rather than envlease, and window size changes are carried. envlease exits with the
shell's exit code.

When standard input is not a terminal (a pipe or a file), there is no
pseudo-terminal, as with ssh: the shell reads its commands from standard input
and ends when it ends.`,
		Example:           "  envlease shell env_19cec2a0e00p4k7w1m9z3c5b\n  echo 'uname -a' | envlease shell env_19cec2a0e00p4k7w1m9z3c5b",
		Args:              args(1),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, _ *cobra.Command, got []string) error {
			// A pseudo-terminal would turn the input's end into nothing
			// the shell sees (EOF is a character only at a line's start
			// in canonical mode), so a piped script never ended.
			f, ok := a.stdin.(*os.File)
			tty := ok && term.IsTerminal(int(f.Fd()))
			return a.execIn(ctx, got[0], shellCommand, tty, false)
		}),
	}
}

// execIn runs argv in environment id and returns CMD's exit as a
// commandExit (or nil for 0).
func (a *app) execIn(ctx context.Context, id string, argv []string, tty, noStdin bool) error {
	s, err := a.session()
	if err != nil {
		return err
	}
	// Signals go to the command, not to envlease: the root's context ends
	// on SIGINT and SIGTERM, so the command runs under one that does not
	// (keeping --timeout).
	run := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		run, cancel = context.WithDeadline(run, d)
		defer cancel()
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	forward := make(chan syscall.Signal, 8)
	go func() {
		for sig := range sigs {
			if s, ok := sig.(syscall.Signal); ok {
				forward <- s
			}
		}
	}()

	o := execsession.Options{Command: argv, TTY: tty, Stdout: a.stdout, Stderr: a.stderr, Signals: forward}
	if !noStdin {
		o.Stdin = a.stdin
	}
	if tty {
		o.Size = execsession.Size{Rows: 24, Cols: 80}
		o.Term = a.getenv("TERM")
		if f, ok := a.stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			if w, h, err := term.GetSize(int(f.Fd())); err == nil && w > 0 && h > 0 {
				o.Size = execsession.Size{Rows: uint16(h), Cols: uint16(w)}
			}
			resize, stop := watchSize(int(f.Fd()))
			defer stop()
			o.Resize = resize
		}
		if f, ok := a.stdin.(*os.File); ok && !noStdin && term.IsTerminal(int(f.Fd())) {
			old, err := term.MakeRaw(int(f.Fd()))
			if err == nil {
				defer func() { _ = term.Restore(int(f.Fd()), old) }()
			}
		}
	}
	code, err := execsession.Exec(run, s.client, id, o)
	if err != nil {
		return err
	}
	if code != 0 {
		return &commandExit{code: code}
	}
	return nil
}
