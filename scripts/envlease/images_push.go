package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
)

// imageExpires is how long a pushed image is kept by default: the longest an
// artifact may be, since templates name it.
const imageExpires = "2160h"

// platformsLabel is the label an image artifact carries its platforms in.
const platformsLabel = "platforms"

func (a *app) imagesPushCommand() *cobra.Command {
	var (
		req       client.ArtifactCreate
		labelArgs []string
	)
	cmd := &cobra.Command{
		Use:   "push ARCHIVE [--name N]",
		Short: "Upload an image archive as an artifact a container template can run",
		Long: `Check ARCHIVE, an OCI image layout in a tar (as "docker buildx build --output
type=oci,dest=image.tar" or "crane pull --format=oci" write it) or a
"docker save" tarball, uncompressed, by reading it as a node will
(manifests, configurations, every layer present), then upload it as an
artifact of content type application/vnd.oci.image.layout.v1+tar or
application/vnd.docker.image.archive.v1+tar, labelled with its platforms.
It prints the artifact's id: name it in a template as
"image": {"artifact": "<id>"}. The artifact expires after --expires
(default and at most 90 days); push again and update the template before.`,
		Example: `  envlease images push tool.tar --name tool-1.2
  ID=$(envlease images push tool.tar)
  envlease images push tool.tar -o json | jq -r .id`,
		Args: args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			var err error
			if req.Labels, err = parseLabels(labelArgs); err != nil {
				return err
			}
			ar, err := inspectImageArchive(got[0])
			if err != nil {
				return usagef("%v", err)
			}
			if req.Labels == nil {
				req.Labels = map[string]string{}
			}
			req.Labels[platformsLabel] = strings.Join(ar.Platforms, ",")
			req.ContentType = ar.ContentType
			art, err := a.pushFile(ctx, got[0], req)
			if err != nil {
				return err
			}
			a.say("Pushed %s (%s, %s) as %s (%s). In a template: \"runtime\": \"container\", \"image\": {\"artifact\": %q}",
				got[0], map[string]string{"oci": "OCI image layout", "docker": "docker save tarball"}[ar.Kind],
				strings.Join(ar.Platforms, ", "), art.ID, size(art.Size), art.ID)
			if a.json() {
				return a.printJSON(art)
			}
			_, err = a.stdout.Write([]byte(art.ID + "\n"))
			return err
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "", "the artifact's name (default: the archive's file name)")
	f.StringVar(&req.Expires, "expires", imageExpires, "when it expires: a duration (24h) or an RFC 3339 time")
	f.StringVar(&req.Project, "project", "", "a project reference")
	f.StringArrayVarP(&labelArgs, "label", "l", nil, "a label KEY=VALUE (repeatable)")
	return cmd
}
