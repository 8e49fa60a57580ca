package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/bytesize"
	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/envfiles"
)

// remoteArg splits ENV:PATH; ok is false for a local path (one whose
// first colon comes after a slash, or that has none: ./a:b is local).
func remoteArg(s string) (env, p string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.ContainsRune(s[:i], '/') {
		return "", "", false
	}
	p = s[i+1:]
	if p == "" {
		p = "."
	}
	return s[:i], p, true
}

func (a *app) cpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and folders into or out of an environment",
		Long: `Copy between this machine and a ready environment: one of SRC and DST is ENV:PATH
(PATH absolute from the environment's root, or relative to its working folder),
the other a local path, or - for standard input or output.

A file goes to DST, or into DST when DST is a folder (or ends with /); a folder
is copied with all it holds into DST, or into DST/NAME when DST is a folder that
exists already, as cp -r does. Files keep their permission bits. Each file is
written atomically inside the environment, as its user, and only where it may
write; the bytes stream both ways (a file of any size). Local symbolic links
are not followed; they are left out, with a note.

Exit codes: 1 when a path is refused (outside the environment, read-only, not
permitted); 4 when there is no such environment or file; see
'envlease help exit-codes'. See docs/files.md.`,
		Example: "  envlease cp ./app.py env_19cec2a0e00p4k7w1m9z3c5b:/workspace/\n" +
			"  envlease cp ./src env_19cec2a0e00p4k7w1m9z3c5b:src\n" +
			"  envlease cp env_19cec2a0e00p4k7w1m9z3c5b:/workspace/out.log .\n" +
			"  tar c . | envlease cp - env_19cec2a0e00p4k7w1m9z3c5b:/tmp/src.tar",
		Args:              args(2),
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: a.runE(func(ctx context.Context, _ *cobra.Command, got []string) error {
			src, dst := got[0], got[1]
			senv, spath, sremote := remoteArg(src)
			denv, dpath, dremote := remoteArg(dst)
			if sremote == dremote {
				return usagef("one of SRC and DST must be ENV:PATH and the other a local path")
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			began := time.Now()
			var st copyStats
			if dremote {
				err = a.upload(ctx, s.client.Files(denv), src, dpath, &st)
			} else {
				err = a.download(ctx, s.client.Files(senv), spath, dst, &st)
			}
			if err != nil {
				return filesError(err)
			}
			if dst != "-" {
				a.say("copied %d file(s), %s in %s", st.files, bytesize.Format(uint64(st.bytes)), time.Since(began).Round(time.Millisecond))
			}
			return nil
		}),
	}
}

type copyStats struct{ files, bytes int64 }

// filesError gives a refused path the exit code of what it is.
func filesError(err error) error {
	var e *envfiles.Error
	if errors.As(err, &e) && e.Code == "not_found" {
		return &codedError{code: exitNotFound, err: err}
	}
	return err
}

func (a *app) upload(ctx context.Context, f *client.Files, src, dst string, st *copyStats) error {
	if src == "-" {
		fi, err := f.Write(ctx, dst, a.stdin, client.WriteOptions{})
		if err == nil {
			st.files, st.bytes = 1, fi.Size
		}
		return err
	}
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	// Into DST when it is a folder there (or says it is one).
	target := dst
	if strings.HasSuffix(dst, "/") {
		target = path.Join(dst, filepath.Base(src))
	} else if ri, err := f.Stat(ctx, dst); err == nil && ri.IsDir() {
		target = path.Join(dst, filepath.Base(src))
	}
	if !info.IsDir() {
		return uploadFile(ctx, f, src, target, info.Mode(), st)
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := path.Join(target, filepath.ToSlash(rel))
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			a.say("left out %s: a symbolic link", p)
			return nil
		case d.IsDir():
			di, err := d.Info()
			if err != nil {
				return err
			}
			_, err = f.Mkdir(ctx, to, di.Mode().Perm()|0o700, true)
			return err
		case !d.Type().IsRegular():
			a.say("left out %s: not a regular file", p)
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return uploadFile(ctx, f, p, to, fi.Mode(), st)
	})
}

func uploadFile(ctx context.Context, f *client.Files, src, dst string, mode fs.FileMode, st *copyStats) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	m := mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	fi, err := f.Write(ctx, dst, in, client.WriteOptions{Mode: &m, Parents: true})
	if err != nil {
		return err
	}
	st.files++
	st.bytes += fi.Size
	return nil
}

func (a *app) download(ctx context.Context, f *client.Files, src, dst string, st *copyStats) error {
	ri, err := f.Stat(ctx, src)
	if err != nil {
		return err
	}
	if dst == "-" {
		return downloadFile(ctx, f, src, nil, a.stdout, st)
	}
	target := dst
	if li, err := os.Stat(dst); (err == nil && li.IsDir()) || strings.HasSuffix(dst, string(os.PathSeparator)) {
		target = filepath.Join(dst, path.Base(ri.Path))
	}
	if !ri.IsDir() {
		return downloadFile(ctx, f, src, &target, nil, st)
	}
	var walk func(from, to string) error
	walk = func(from, to string) error {
		if err := os.MkdirAll(to, 0o755); err != nil {
			return err
		}
		l, err := f.List(ctx, from)
		if err != nil {
			return err
		}
		if l.Truncated {
			return fmt.Errorf("%s holds more than %d entries: copy it in parts", from, envfiles.MaxList)
		}
		for _, e := range l.Entries {
			name, err := entryName(e.Name)
			if err != nil {
				return fmt.Errorf("%s: %w", from, err)
			}
			dst := filepath.Join(to, name)
			switch e.Type {
			case envfiles.TypeDir:
				if err := walk(e.Path, dst); err != nil {
					return err
				}
			case envfiles.TypeFile:
				if err := downloadFile(ctx, f, e.Path, &dst, nil, st); err != nil {
					return err
				}
			default:
				a.say("left out %s: a %s", e.Path, e.Type)
			}
		}
		return nil
	}
	return walk(ri.Path, target)
}

// entryName is an entry's name as a download writes it: one name within
// the folder it lands in. The node's listing is trusted no further than
// that, so no answer writes beside or above the copy.
func entryName(name string) (string, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") || filepath.Base(name) != name {
		return "", fmt.Errorf("the node listed an entry named %q, which is not one name in its folder: not copied", name)
	}
	return name, nil
}

// downloadFile copies the file at src to the local file *dst (through a
// temporary beside it, renamed once whole) or to w.
func downloadFile(ctx context.Context, f *client.Files, src string, dst *string, w io.Writer, st *copyStats) error {
	rc, fi, err := f.Open(ctx, src)
	if err != nil {
		return err
	}
	defer rc.Close()
	if dst == nil {
		n, err := io.Copy(w, rc)
		st.files, st.bytes = st.files+1, st.bytes+n
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(*dst), ".envlease-cp-*")
	if err != nil {
		return err
	}
	n, err := io.Copy(tmp, rc)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil && fi.Perm() != 0 {
		err = os.Chmod(tmp.Name(), fi.Perm())
	}
	if err == nil {
		err = os.Rename(tmp.Name(), *dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	st.files, st.bytes = st.files+1, st.bytes+n
	return nil
}

func (a *app) fsCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "fs",
		Short: "List, read, remove and make files inside an environment",
		Long: `Work with a ready environment's files: ls, cat, stat, mkdir, rm and watch, each
taking the environment's id and a path (absolute from the environment's root, or
relative to its working folder), as its user and within what it may write. Copy
files and folders with 'envlease cp'. See docs/files.md.`,
	}
	var recursive, parents, watchRec bool
	ls := &cobra.Command{
		Use: "ls ENV [PATH]", Short: "List a folder (default: the working folder)",
		Args: cobra.RangeArgs(1, 2),
		RunE: a.runE(func(ctx context.Context, _ *cobra.Command, got []string) error {
			p := "."
			if len(got) > 1 {
				p = got[1]
			}
			f, err := a.files(got[0])
			if err != nil {
				return err
			}
			l, err := f.List(ctx, p)
			if err != nil {
				return filesError(err)
			}
			if a.json() {
				return a.printJSON(l)
			}
			t := newTable(a.stdout, "MODE", "SIZE", "MODIFIED", "NAME")
			for _, e := range l.Entries {
				name := e.Name
				switch e.Type {
				case envfiles.TypeDir:
					name += "/"
				case envfiles.TypeSymlink:
					name += " -> " + e.Target
				}
				t.row(typeLetter(e.Type)+e.Mode, fmt.Sprint(e.Size), e.Modified.Local().Format("2006-01-02 15:04:05"), name)
			}
			if l.Truncated {
				a.say("(only the first %d entries)", envfiles.MaxList)
			}
			return t.flush()
		}),
	}
	cat := &cobra.Command{
		Use: "cat ENV PATH", Short: "Write a file to standard output", Args: args(2),
		RunE: a.runE(func(ctx context.Context, _ *cobra.Command, got []string) error {
			f, err := a.files(got[0])
			if err != nil {
				return err
			}
			var st copyStats
			return filesError(downloadFile(ctx, f, got[1], nil, a.stdout, &st))
		}),
	}
	stat := &cobra.Command{
		Use: "stat ENV PATH", Short: "Describe a file or folder (a link at its end is not followed)", Args: args(2),
		RunE: a.runE(func(ctx context.Context, _ *cobra.Command, got []string) error {
			f, err := a.files(got[0])
			if err != nil {
				return err
			}
			fi, err := f.Stat(ctx, got[1])
			if err != nil {
				return filesError(err)
			}
			if a.json() {
				return a.printJSON(fi)
			}
			t := newTable(a.stdout, "PATH", "TYPE", "MODE", "SIZE", "MODIFIED")
			t.row(fi.Path, fi.Type, fi.Mode, fmt.Sprint(fi.Size), fi.Modified.Local().Format(time.RFC3339))
			return t.flush()
		}),
	}
	mkdir := &cobra.Command{
		Use: "mkdir ENV PATH [-p]", Short: "Make a folder", Args: args(2),
		RunE: a.runE(func(ctx context.Context, _ *cobra.Command, got []string) error {
			f, err := a.files(got[0])
			if err != nil {
				return err
			}
			_, err = f.Mkdir(ctx, got[1], 0, parents)
			return filesError(err)
		}),
	}
	mkdir.Flags().BoolVarP(&parents, "parents", "p", false, "make missing parents too; an existing folder is no error")
	rm := &cobra.Command{
		Use: "rm ENV PATH [-r]", Short: "Remove a file, a link or an empty folder", Args: args(2),
		RunE: a.runE(func(ctx context.Context, _ *cobra.Command, got []string) error {
			f, err := a.files(got[0])
			if err != nil {
				return err
			}
			return filesError(f.Remove(ctx, got[1], recursive))
		}),
	}
	rm.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove a folder and everything in it")
	watch := &cobra.Command{
		Use: "watch ENV [PATH] [-r]", Short: "Print a folder's changes as they happen, until interrupted",
		Args: cobra.RangeArgs(1, 2),
		RunE: a.runE(func(ctx context.Context, _ *cobra.Command, got []string) error {
			p := "."
			if len(got) > 1 {
				p = got[1]
			}
			f, err := a.files(got[0])
			if err != nil {
				return err
			}
			err = f.Watch(ctx, p, watchRec, func(c envfiles.FileChange) error {
				if a.json() {
					return a.printJSON(c)
				}
				switch c.Op {
				case envfiles.OpWatching:
					a.say("watching %s", c.Path)
				case envfiles.OpEnd:
					a.say("the watch ended: %s", c.Reason)
				default:
					fmt.Fprintf(a.stdout, "%-8s %s\n", c.Op, c.Path)
				}
				return nil
			})
			if errors.Is(err, client.ErrWatchEnded) {
				return nil
			}
			return filesError(err)
		}),
	}
	watch.Flags().BoolVarP(&watchRec, "recursive", "r", false, "watch the folders below too")
	for _, sub := range []*cobra.Command{ls, cat, stat, mkdir, rm, watch} {
		sub.ValidArgsFunction = a.completeEnvironments
		c.AddCommand(sub)
	}
	return c
}

func typeLetter(t string) string {
	switch t {
	case envfiles.TypeDir:
		return "d"
	case envfiles.TypeSymlink:
		return "l"
	case envfiles.TypeFile:
		return "-"
	}
	return "?"
}

func (a *app) files(env string) (*client.Files, error) {
	s, err := a.session()
	if err != nil {
		return nil, err
	}
	return s.client.Files(env), nil
}
