//go:build linux

package ctrinit

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Binary is the init as the node has it: a copy of the agent's executable
// in a folder every container's user can reach, and, when it is linked
// dynamically, the loader and libraries it needs.
type Binary struct {
	Exe    string
	Interp string
	Libs   []string
}

// Mount is a file of the node bound read-only into a container.
type Mount struct{ Source, Destination string }

// libSearch is where a library the binary names is looked for.
var libSearch = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// Install copies the running executable to dir/envlease-init (the agent's
// own may lie in a folder a container's user cannot enter) and finds what
// it needs to run in a container.
func Install(dir string) (*Binary, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	b := &Binary{Exe: filepath.Join(dir, "envlease-init")}
	if err := copyFile(self, b.Exe); err != nil {
		return nil, fmt.Errorf("container init: %w", err)
	}
	f, err := elf.Open(b.Exe)
	if err != nil {
		return nil, fmt.Errorf("container init: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		raw, err := io.ReadAll(p.Open())
		if err != nil {
			return nil, fmt.Errorf("container init: its loader: %w", err)
		}
		b.Interp = string(raw[:len(raw)-1])
	}
	if b.Interp == "" {
		return b, nil
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("container init: its libraries: %w", err)
	}
	for _, name := range libs {
		found := ""
		for _, d := range libSearch {
			if st, err := os.Stat(filepath.Join(d, name)); err == nil && st.Mode().IsRegular() {
				found = filepath.Join(d, name)
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("container init: library %s not found", name)
		}
		b.Libs = append(b.Libs, found)
	}
	return b, nil
}

// Mounts are the files to bind read-only into a container.
func (b *Binary) Mounts() []Mount {
	ms := []Mount{{Source: b.Exe, Destination: Path}}
	if b.Interp != "" {
		ms = append(ms, Mount{Source: b.Interp, Destination: libDir + "/ld.so"})
		for _, l := range b.Libs {
			ms = append(ms, Mount{Source: l, Destination: libDir + "/" + filepath.Base(l)})
		}
	}
	return ms
}

// Wrap is the command line that runs args under the init.
func (b *Binary) Wrap(args []string) []string {
	var out []string
	if b.Interp != "" {
		// The loader runs the init as a program of its own, its argv[0]
		// still Path, with the libraries bound beside it.
		out = []string{libDir + "/ld.so", "--argv0", Path, "--library-path", libDir, Path}
	} else {
		out = []string{Path}
	}
	return append(append(out, "--"), args...)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".new"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
