package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

func (a *app) imagesListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the image archives among your sealed, unexpired artifacts, newest first",
		Long: `List the artifacts that hold an image archive (their content type says so, as
'envlease images push' sets it), newest first. The service lists all
artifacts; this reads them all and keeps the images.`,
		Args: args(0),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			images := []domain.Artifact{}
			q := client.PageQuery{Limit: 200}
			for {
				page, err := s.client.ListArtifacts(ctx, q)
				if err != nil {
					return err
				}
				for _, art := range page.Artifacts {
					if domain.IsImageArchive(art.ContentType) {
						images = append(images, art)
					}
				}
				if page.Next == "" {
					break
				}
				q.Cursor = page.Next
			}
			if a.json() {
				return a.printJSON(map[string]any{"images": images})
			}
			now := time.Now()
			t := newTable(a.stdout, "ID", "NAME", "PLATFORMS", "SIZE", "CREATED", "EXPIRES")
			for _, art := range images {
				t.row(art.ID, art.Name, art.Labels[platformsLabel], size(art.Size), ago(art.Created, now), ago(art.Expires, now))
			}
			return t.flush()
		}),
	}
	return cmd
}
