package main

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"runtime"

	"github.com/spf13/cobra"
)

// openBrowser starts the desktop's browser on u; tests replace it.
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
		Long: `Open the web console of the profile's API in the browser, signed in with the
profile's token. The token travels in the URL's fragment (#token=...), which
browsers never send to a server; the page moves it to the tab's session
storage and removes it from the address bar and history at once.`,
		Args: args(0),
		RunE: a.runE(func(_ context.Context, _ *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			token := s.profile.Token
			if v := a.getenv("ENVLEASE_TOKEN"); v != "" {
				token = v
			}
			base, err := url.Parse(s.client.BaseURL())
			if err != nil {
				return usagef("%v", err)
			}
			page := base.JoinPath("/")
			fmt.Fprintf(a.stderr, "opening the console at %s\n", page)
			if err := openBrowser(page.String() + "#token=" + url.QueryEscape(token)); err != nil {
				return fmt.Errorf("could not start a browser (%v); open %s and sign in with your token", err, base.JoinPath("/"))
			}
			return nil
		}),
	}
}
