package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
)

func (a *app) artifactsPullCommand() *cobra.Command {
	var (
		to    string
		force bool
	)
	cmd := &cobra.Command{
		Use:   "pull ID [--to PATH]",
		Short: "Download an artifact and check its SHA-256",
		Long: `Download an artifact through a fresh signed link into --to (default: its name,
in the current folder; - for standard output). The bytes go to a temporary
file beside the target and replace it only once their size and SHA-256 match
the artifact's, so a failed or tampered download never leaves a file behind.
An existing file is replaced only with --force.`,
		Example: `  envlease artifacts pull art_… --to /tmp/build.tar.gz
  envlease artifacts pull art_… --to - | tar -xz`,
		Args: args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			id := got[0]
			art, err := s.client.GetArtifact(ctx, id)
			if err != nil {
				return err
			}
			if to == "-" {
				progress, finish := a.progress("download "+art.Name, art.Size)
				_, err := s.client.Pull(ctx, id, a.stdout, client.PullOptions{Progress: progress})
				finish()
				return err
			}
			if to == "" {
				to = localName(art.Name, art.ID)
			}
			if info, err := os.Stat(to); err == nil && info.IsDir() {
				to = filepath.Join(to, localName(art.Name, art.ID))
			}
			if _, err := os.Stat(to); err == nil && !force {
				return usagef("%s exists; --force replaces it", to)
			} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			tmp, err := os.CreateTemp(filepath.Dir(to), "."+filepath.Base(to)+".*.part")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name()) // gone after the rename; removes a failed download
			progress, finish := a.progress("download "+art.Name, art.Size)
			art, err = s.client.Pull(ctx, id, tmp, client.PullOptions{Progress: progress})
			finish()
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := os.Chmod(tmp.Name(), 0o644); err != nil {
				return err
			}
			if err := os.Rename(tmp.Name(), to); err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(map[string]any{"artifact": art, "path": to})
			}
			return details(a.stdout, "ID", art.ID, "NAME", art.Name, "SIZE", size(art.Size), "SHA256", art.SHA256+" (verified)", "PATH", to)
		}),
	}
	cmd.Flags().StringVar(&to, "to", "", "where to write it: a file, a folder, or - for standard output (default: its name)")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing file")
	return cmd
}

// localName is the file name to save an artifact under: its name's last
// element, so a name such as "../x" cannot write outside the folder.
func localName(name, id string) string {
	base := filepath.Base(filepath.Clean("/" + filepath.FromSlash(name)))
	if base == "/" || base == "." || base == ".." || base == string(filepath.Separator) {
		return id
	}
	return base
}
