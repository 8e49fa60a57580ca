package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/envlease/envlease/shared/client"
)

// app is what every command shares: its streams, the global flags, and the
// profile they select.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	// Global flags.
	profileFlag string
	output      string
	timeout     time.Duration
	// quiet is -q of the commands that make or show one thing: print
	// only its id, for a script to keep.
	quiet bool

	// started is set once a command's own code runs: an error before that
	// (an unknown command or flag, a wrong number of arguments, a missing
	// required flag) is a usage error.
	started bool
}

// run executes one command line and returns the process's exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv, output: "table"}
	defer writeTimings(getenv, stderr)
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var cx *commandExit
	if errors.As(err, &cx) {
		return cx.code
	}
	code := exitCode(err)
	if !a.started && code == exitError {
		code = exitUsage
	}
	a.printError(err, code)
	if code == exitUsage && !a.started {
		fmt.Fprintln(stderr, "Run 'envlease --help' for usage.")
	}
	return code
}

func (a *app) rootCommand() *cobra.Command {
	// Commands are listed in the order a person uses them, not alphabetically.
	cobra.EnableCommandSorting = false
	root := &cobra.Command{
		Use:   "envlease",
		Short: "Lease short-lived environments from templates",
		Long: `envlease is the command-line client of the envlease API.

Log in once with 'envlease login --url URL' (the token is read from standard
input, or prompted for without echo), then lease, list and release
environments, manage keys and tokens, and push and pull artifacts.

ENVLEASE_URL and ENVLEASE_TOKEN override the profile's URL and token;
ENVLEASE_PROFILE selects a profile like --profile.`,
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// Checked here rather than per command, so a bad -o fails before
		// anything is sent.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.output == "csv" && cmd.Annotations[csvAnnotation] == "" {
				return usagef("-o csv: only usage and budgets write csv; want table or json")
			}
			if a.output != "table" && a.output != "json" && a.output != "csv" {
				return usagef("-o %q: want table or json", a.output)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(flagError)
	pf := root.PersistentFlags()
	pf.StringVar(&a.profileFlag, "profile", "", "the profile to use (default: the config's default profile)")
	pf.StringVarP(&a.output, "output", "o", "table", "output format: table or json (json goes to standard output; messages to standard error); usage and budgets also csv")
	pf.DurationVar(&a.timeout, "timeout", 0, "give up after this long (exit code 6), for example 30s or 2m")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "csv"}, cobra.ShellCompDirectiveNoFileComp))

	root.AddGroup(&cobra.Group{ID: "env", Title: "Environments:"}, &cobra.Group{ID: "account", Title: "Account:"},
		&cobra.Group{ID: "org", Title: "Organization:"})
	for _, c := range []*cobra.Command{a.leaseCommand(), a.runCommand(), a.lsCommand(), a.getCommand(), a.logsCommand(), a.topCommand(), a.netCommand(), a.touchCommand(), a.previewCommand(), a.rmCommand(), a.sandboxCommand(), a.checkpointCommand(), a.pauseCommand(), a.resumeCommand(), a.wakeCommand(), a.forkCommand()} {
		c.GroupID = "env"
		root.AddCommand(c)
	}
	root.AddCommand(a.portForwardCommand())
	for _, c := range []*cobra.Command{a.execCommand(), a.shellCommand(), a.cpCommand(), a.fsCommand()} {
		c.GroupID = "env"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.loginCommand(), a.logoutCommand(), a.whoamiCommand(), a.tokensCommand()} {
		c.GroupID = "account"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.templatesCommand(), a.quotasCommand(), a.usageCommand(), a.budgetsCommand(), a.keysCommand(), a.issuersCommand(), a.secretsCommand(), a.artifactsCommand(), a.imagesCommand(), a.eventsCommand(), a.webhooksCommand()} {
		c.GroupID = "org"
		root.AddCommand(c)
	}
	root.AddCommand(a.consoleCommand())
	root.AddCommand(a.mcpCommand())
	root.AddCommand(newExitCodesTopic())
	return root
}

// runE wraps a command's code: it marks the command as started, and bounds
// it by --timeout.
func (a *app) runE(f func(ctx context.Context, cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.started = true
		ctx := cmd.Context()
		if a.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, a.timeout)
			defer cancel()
		}
		return f(ctx, cmd, args)
	}
}

// args checks the positional arguments; a mismatch is a usage error.
func args(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, got []string) error {
		if len(got) != n {
			if n == 0 {
				return usagef("%s takes no arguments", cmd.CommandPath())
			}
			return usagef("usage: %s", cmd.UseLine())
		}
		return nil
	}
}

func (a *app) json() bool { return a.output == "json" }

// printJSON writes v to standard output, indented.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// say writes a message for people to standard error.
func (a *app) say(format string, args ...any) {
	fmt.Fprintf(a.stderr, format+"\n", args...)
}

func (a *app) printError(err error, code int) {
	if a.json() {
		out := map[string]any{"error": err.Error(), "exitCode": code}
		if e, ok := client.AsError(err); ok {
			out["error"], out["code"], out["status"], out["requestId"] = e.Message, e.Code, e.Status, e.RequestID
			if e.Field != "" {
				out["field"] = e.Field
			}
		}
		b, _ := json.Marshal(out)
		fmt.Fprintln(a.stderr, string(b))
		return
	}
	fmt.Fprintln(a.stderr, "envlease: "+a.explain(err, code))
}

// isTerminal reports whether f is a terminal (progress bars and prompts
// only go to one).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func userAgent() string { return "envlease-cli/" + version() }
