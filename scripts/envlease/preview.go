package main

import (
	"context"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
)

// previewOpenWait is how long the page that forwards the browser to a
// preview is kept for the browser to read it.
var previewOpenWait = 5 * time.Second

// previewPage sends the browser on to the link, so the link (whose token
// is its whole secret) is never on the opener's command line.
var previewPage = template.Must(template.New("preview").Parse(`<!doctype html>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0;url={{.}}">
<title>envlease preview</title>
<script>location.replace({{.}})</script>
<p><a href="{{.}}">Open the preview</a></p>
`))

func (a *app) previewCommand() *cobra.Command {
	var expires string
	var open bool
	c := &cobra.Command{
		Use:   "preview ENV [EXPORT]",
		Short: "Make a link that opens an environment's web export in a browser",
		Long: `Make a preview link to one web export of a ready environment (the only one
when EXPORT is left out) and print it. The link works in any browser, with
no envlease software, straight at the node that runs the environment, until
--expires passes (1h by default, at most the service's maximum, and never
past the environment's end or your token's) or it is revoked in the console.
Whoever holds the link can open the export: send it as you would a password.
With --open it is opened in this machine's browser too; on a machine with no
display it is only printed. The API answers 409 while the environment is not
ready, and 422 for an export that does not exist.`,
		Args: func(cmd *cobra.Command, got []string) error {
			if len(got) < 1 || len(got) > 2 {
				return usagef("usage: %s", cmd.UseLine())
			}
			return nil
		},
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			export := ""
			if len(got) == 2 {
				export = got[1]
			}
			p, err := s.client.CreatePreview(ctx, got[0], export, expires)
			if err != nil {
				return err
			}
			if a.json() {
				if err := a.printJSON(p); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(a.stdout, p.URL)
				fmt.Fprintf(a.stderr, "preview %s of %s (%s), until %s\n", p.ID, got[0], p.Export, p.Expires.Local().Format(time.DateTime))
			}
			if !open {
				return nil
			}
			if !hasDisplay(a.getenv) {
				fmt.Fprintln(a.stderr, "no display here: open the link above in a browser")
				return nil
			}
			return openPreview(ctx, p.URL)
		}),
	}
	c.Flags().StringVar(&expires, "expires", "", "how long the link opens, such as 30m or 4h (default 1h)")
	c.Flags().BoolVar(&open, "open", false, "open the link in this machine's browser as well")
	return c
}

// openPreview opens link through a page in a file only this user can
// read, removed once the browser has had time to read it.
func openPreview(ctx context.Context, link string) error {
	dir, err := os.MkdirTemp("", "envlease-preview-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "preview.html")
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = previewPage.Execute(f, link)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := openBrowser(file); err != nil {
		return fmt.Errorf("could not start a browser (%v); open the link above", err)
	}
	select {
	case <-time.After(previewOpenWait):
	case <-ctx.Done():
	}
	return nil
}
