package main

import (
	"github.com/spf13/cobra"
)

func (a *app) imagesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "images",
		Aliases: []string{"image"},
		Short:   "Push and list container images kept as artifacts",
		Long: `A container template (runtime "container") runs from an image: an OCI image
reference the node pulls from its registry, or an artifact of your
organization holding an image archive, for nodes without registry access
and images of your own. 'push' checks an archive (an OCI image layout in a
tar, or a docker save tarball) and uploads it as such an artifact; name its
id in the template: "image": {"artifact": "<id>"}. 'ls' lists them.`,
	}
	cmd.AddCommand(a.imagesPushCommand(), a.imagesListCommand())
	return cmd
}
