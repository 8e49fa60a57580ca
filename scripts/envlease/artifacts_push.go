package main

import (
	"context"
	"mime"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

func (a *app) artifactsPushCommand() *cobra.Command {
	var (
		req       client.ArtifactCreate
		labelArgs []string
	)
	cmd := &cobra.Command{
		Use:   "push FILE [--name N] [--expires D]",
		Short: "Upload a file as a new artifact",
		Long: `Upload FILE as a new artifact: digest it, create the artifact, send its
bytes to the presigned URL (one PUT, or parts of 64 MiB for larger files),
and seal it once object storage has verified the SHA-256. The artifact
expires after --expires (a duration from now or an RFC 3339 time; default 7
days, at most 90 days).`,
		Example: `  envlease artifacts push build.tar.gz --expires 24h
  ID=$(envlease artifacts push build.tar.gz -o json | jq -r .id)`,
		Args: args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			var err error
			if req.Labels, err = parseLabels(labelArgs); err != nil {
				return err
			}
			art, err := a.pushFile(ctx, got[0], req)
			if err != nil {
				return err
			}
			a.say("Pushed %s as %s (%s).", got[0], art.ID, size(art.Size))
			return a.printArtifact(art)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "", "the artifact's name, also the download's file name (default: the file's)")
	f.StringVar(&req.Expires, "expires", "", "when it expires: a duration (24h) or an RFC 3339 time (default 7 days)")
	f.StringVar(&req.ContentType, "content-type", "", "its media type (default: from the name's extension)")
	f.StringVar(&req.Project, "project", "", "a project reference")
	f.StringArrayVarP(&labelArgs, "label", "l", nil, "a label KEY=VALUE (repeatable)")
	return cmd
}

// pushFile uploads file as a new artifact described by req (its name and
// content type defaulted from the file's), with progress bars on a terminal.
func (a *app) pushFile(ctx context.Context, file string, req client.ArtifactCreate) (domain.Artifact, error) {
	f, err := os.Open(file)
	if err != nil {
		return domain.Artifact{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return domain.Artifact{}, err
	}
	if !info.Mode().IsRegular() {
		return domain.Artifact{}, usagef("%s is not a regular file", file)
	}
	if req.Name == "" {
		req.Name = filepath.Base(file)
	}
	if req.ContentType == "" {
		req.ContentType = contentType(req.Name)
	}
	s, err := a.session()
	if err != nil {
		return domain.Artifact{}, err
	}
	digest, digested := a.progress("digest "+req.Name, info.Size())
	upload, uploaded := a.progress("upload "+req.Name, info.Size())
	art, err := s.client.Push(ctx, f, info.Size(), req, client.PushOptions{
		DigestProgress: func(done, total int64) {
			if digest != nil {
				digest(done, total)
				if done == total {
					digested() // its line ends before the upload's starts
				}
			}
		},
		Progress: upload,
	})
	digested()
	uploaded()
	return art, err
}

// contentType guesses a media type from a name's extension, without
// parameters (the service takes a bare type); empty lets the service use
// application/octet-stream.
func contentType(name string) string {
	t := mime.TypeByExtension(filepath.Ext(name))
	if t == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(t)
	if err != nil {
		return ""
	}
	return mt
}
