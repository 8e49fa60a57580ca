package main

import (
	"context"
	"fmt"
	"html/template"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/spf13/cobra"
)

// openBrowser starts the desktop's browser on target, a file or an address;
// tests replace it. target ends up on the opener's command line, which every
// user of the machine can read, so it is never the sign-in address itself:
// only the path of a file that only this user can read.
var openBrowser = func(target string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", target)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", target)
	default:
		cmd = exec.Command("xdg-open", target)
	}
	return cmd.Start()
}

// hasDisplay reports whether a browser can be opened here: macOS and
// Windows always have a desktop; elsewhere a graphical session sets
// DISPLAY or WAYLAND_DISPLAY.
func hasDisplay(getenv func(string) string) bool {
	switch runtime.GOOS {
	case "darwin", "windows":
		return true
	}
	return getenv("DISPLAY") != "" || getenv("WAYLAND_DISPLAY") != ""
}

// signInPoll is how often the command looks whether the page has spent the
// code, to remove the sign-in file as soon as it has served.
var signInPoll = time.Second

// signInPage is the file the browser opens: it only sends the browser on to
// the console with the code in the address's fragment, which browsers never
// send to a server. The address is HTML-escaped and JSON-quoted, so nothing
// from the API or the profile can break out of either.
var signInPage = template.Must(template.New("signin").Parse(`<!doctype html>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0;url={{.}}">
<title>envlease console</title>
<script>location.replace({{.}})</script>
<p><a href="{{.}}">Open the envlease console</a></p>
`))

func (a *app) consoleCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "console",
		Short: "Open the web console in the browser, signed in",
		Long: `Open the web console of the profile's API in the browser, signed in as the
profile's person. The token itself never leaves this program: envlease asks
the API for a sign-in code (POST /v1/console/codes), which works once within
60 seconds, writes a page that sends the browser on to /#code=<code> into a
file only you can read, and opens that file. Only the file's path is on the
browser's command line (which other users of this machine can read), never
the code. envlease waits until the page has spent the code (or the code has
expired), then removes the file. The page exchanges the code for a console
token of its own (named "console sign-in", valid 12 hours, listed by
'envlease keys ls'), shows whose account it is and signs in only when you
confirm.

Without a display (DISPLAY and WAYLAND_DISPLAY unset, as over ssh) envlease
prints the sign-in address and how long it works instead, for a browser
elsewhere, and exits.

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
			signIn := page.String() + "#code=" + url.QueryEscape(code.Code)
			if !hasDisplay(a.getenv) {
				// Nothing to open a browser on (ssh, a container): the
				// address goes to this terminal, the user's own, for a
				// browser elsewhere.
				a.say("No display to open a browser on. Open this address in a browser within %.0f seconds (until %s); it signs in once:\n\n  %s\n\nOr open %s and sign in with a token.",
					consoleCodeLifetime.Seconds(), code.Expires.Local().Format("15:04:05"), signIn, page)
				return nil
			}
			file, cleanup, err := writeSignInPage(signIn)
			if err != nil {
				return err
			}
			defer cleanup()
			fmt.Fprintf(a.stderr, "opening the console at %s; waiting until it has used its sign-in code (until %s)\n",
				page, code.Expires.Local().Format("15:04:05"))
			if err := openBrowser(file); err != nil {
				return fmt.Errorf("could not start a browser (%v); open %s and sign in with a token", err, page)
			}
			if used := waitForSignIn(ctx, s, code); used {
				fmt.Fprintln(a.stderr, "the console has used its sign-in code; confirm the account in the browser")
			} else if ctx.Err() == nil {
				fmt.Fprintln(a.stderr, "the sign-in code expired unused; run envlease console again")
			}
			return nil
		}),
	}
}

// writeSignInPage writes the page that sends the browser to target into a
// new folder only this user can enter, and returns its path and what
// removes it.
func writeSignInPage(target string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "envlease-console-")
	if err != nil {
		return "", nil, fmt.Errorf("a folder for the sign-in page: %w", err)
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	file := filepath.Join(dir, "signin.html")
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err == nil {
		err = signInPage.Execute(f, target)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("write the sign-in page: %w", err)
	}
	return file, cleanup, nil
}

// waitForSignIn waits until a console token was made from code (the page
// exchanged it: the caller's keys list a console token created since the
// code) or the code expired. It reports whether the code was used.
func waitForSignIn(ctx context.Context, s *session, code client.ConsoleCode) bool {
	issued := code.Expires.Add(-consoleCodeLifetime)
	for {
		if keys, err := s.client.ListKeys(ctx); err == nil {
			for _, k := range keys {
				if k.Source == "console" && !k.Created.Before(issued) {
					return true
				}
			}
		}
		wait := min(signInPoll, time.Until(code.Expires))
		if wait <= 0 {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
}

// consoleCodeLifetime is how long a sign-in code works (the API's), so the
// time it was issued is its expiry less this.
const consoleCodeLifetime = 60 * time.Second
