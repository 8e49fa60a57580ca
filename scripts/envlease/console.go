package main

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"runtime"

	"github.com/spf13/cobra"
)

// openBrowser starts the desktop's browser on u; tests replace it. u ends up
// on the opener's command line, which every user of the machine can read, so
// it never holds a token: only a sign-in code, which works once and for a
// minute.
var openBrowser = func(u string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", u)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", u)
	default:
		cmd = exec.Command("xdg-open", u)
	}
	return cmd.Start()
}

func (a *app) consoleCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "console",
		Short: "Open the web console in the browser, signed in",
		Long: `Open the web console of the profile's API in the browser, signed in as the
profile's person. The token itself never leaves this program: envlease asks
the API for a sign-in code (POST /v1/console/codes) and opens the page at
/#code=<code>. The code is on the browser's command line, which other users
of this machine can read, so it is made worthless fast: it works once, within
60 seconds. The page exchanges it for a console token of its own (named
"console sign-in", valid 12 hours, listed by 'envlease keys'), shows whose
account it is and signs in only when you confirm.

It needs a person's CLI token: an organization API key is pasted into the
console's sign-in form instead.`,
		Args: args(0),
		RunE: a.runE(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			base, err := url.Parse(s.client.BaseURL())
			if err != nil {
				return usagef("%v", err)
			}
			page := base.JoinPath("/")
			code, err := s.client.CreateConsoleCode(ctx)
			if err != nil {
				return fmt.Errorf("asking for a console sign-in code: %w", err)
			}
			fmt.Fprintf(a.stderr, "opening the console at %s (the sign-in code in the address works once, until %s)\n",
				page, code.Expires.Local().Format("15:04:05"))
			if err := openBrowser(page.String() + "#code=" + url.QueryEscape(code.Code)); err != nil {
				return fmt.Errorf("could not start a browser (%v); open %s and sign in with a token", err, page)
			}
			return nil
		}),
	}
}
