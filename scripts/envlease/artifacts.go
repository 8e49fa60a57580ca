package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

func (a *app) artifactsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "artifacts",
		Aliases: []string{"artifact", "art"},
		Short:   "Push, list, pull and link artifacts",
		Long: `Artifacts are sealed, expiring files of your organization. 'push' uploads a
file straight to object storage through presigned URLs (in parts for files
over 64 MiB) and seals it once the store has verified its SHA-256; 'pull'
downloads one through a signed link and checks its SHA-256; 'link' prints a
signed link anyone can download with until it expires.

Progress bars are drawn on standard error when it is a terminal.`,
	}
	cmd.AddCommand(a.artifactsPushCommand(), a.artifactsListCommand(), a.artifactsGetCommand(),
		a.artifactsPullCommand(), a.artifactsLinkCommand())
	return cmd
}

func (a *app) artifactsListCommand() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sealed, unexpired artifacts, newest first",
		Args:    args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return usagef("--limit must be 0 (no limit) or more")
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			var arts []domain.Artifact
			q := client.PageQuery{Limit: 200}
			for {
				if limit > 0 {
					q.Limit = min(200, limit-len(arts))
				}
				page, err := s.client.ListArtifacts(ctx, q)
				if err != nil {
					return err
				}
				arts = append(arts, page.Artifacts...)
				if page.Next == "" || (limit > 0 && len(arts) >= limit) {
					break
				}
				q.Cursor = page.Next
			}
			if a.json() {
				return a.printJSON(map[string]any{"artifacts": arts})
			}
			now := time.Now()
			t := newTable(a.stdout, "ID", "NAME", "SIZE", "CREATED", "EXPIRES", "SHA256")
			for _, art := range arts {
				t.row(art.ID, art.Name, size(art.Size), ago(art.Created, now), ago(art.Expires, now), shortHash(art.SHA256))
			}
			return t.flush()
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "show at most this many (0: all)")
	return cmd
}

func (a *app) artifactsGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show an artifact",
		Args:  args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			art, err := s.client.GetArtifact(ctx, got[0])
			if err != nil {
				return err
			}
			return a.printArtifact(art)
		}),
	}
}

func (a *app) artifactsLinkCommand() *cobra.Command {
	var expires string
	cmd := &cobra.Command{
		Use:   "link ID [--expires D]",
		Short: "Print a signed download link anyone can use until it expires",
		Long: `Print a signed download link of a sealed artifact. Anyone holding it can
download the file with plain HTTP until it expires: at most --expires from
now (default 1 hour), never after the artifact itself, never over 7 days.`,
		Example: `  curl -fo build.tar.gz "$(envlease artifacts link art_… --expires 2h)"`,
		Args:    args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			link, err := s.client.CreateLink(ctx, got[0], expires)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(link)
			}
			a.say("Valid until %s (%s).", link.Expires.Local().Format(time.DateTime), ago(link.Expires, time.Now()))
			_, err = a.stdout.Write([]byte(link.URL + "\n"))
			return err
		}),
	}
	cmd.Flags().StringVar(&expires, "expires", "", "how long the link lives: a duration (2h) or an RFC 3339 time (default 1h)")
	return cmd
}

func (a *app) printArtifact(art domain.Artifact) error {
	if a.json() {
		return a.printJSON(art)
	}
	now := time.Now()
	return details(a.stdout,
		"ID", art.ID,
		"NAME", art.Name,
		"STATE", art.State,
		"SIZE", size(art.Size)+" ("+itoa(art.Size)+" bytes)",
		"SHA256", art.SHA256,
		"CONTENT TYPE", art.ContentType,
		"LABELS", labels(art.Labels),
		"PROJECT", art.Project,
		"PARTS", itoa(int64(art.Chunks)),
		"CREATED", ago(art.Created, now)+" by "+art.CreatedBy,
		"SEALED", agoPtr(art.Sealed, now),
		"EXPIRES", ago(art.Expires, now),
	)
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}
