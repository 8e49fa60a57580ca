package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Owner is a user and group that unpacked files are given.
type Owner struct{ UID, GID int }

// UnpackOptions tune UnpackTar.
type UnpackOptions struct {
	// Owner, when set, owns everything the archive creates (the
	// environment's user, when the agent runs as root). Each entry is handed
	// over as it is created, through its own descriptor or without following
	// links, so nothing the archive did not create changes owner.
	Owner *Owner
	// Budget counts the entries, names and bytes unpacked against the
	// environment's Limits, across all its archives (default: a budget of
	// the default limits for this archive alone).
	Budget *Budget
	// Packed is the archive's size as downloaded, compressed, which the
	// ratio of unpacked to packed bytes is judged by (0: unknown; the ratio
	// is then not judged).
	Packed int64
}

// UnpackTar unpacks an uncompressed tar stream into the folder dir, which
// must exist, and says how many regular files (hard links included) it
// wrote. It opens dir with os.OpenRoot and calls UnpackTarRoot; a caller
// that unpacks into a folder inside an environment's folder should open that
// one through the environment's Root (Root.OpenRoot) and call UnpackTarRoot,
// so that a link the environment planted on the way cannot lead elsewhere.
func UnpackTar(r io.Reader, dir string, opt UnpackOptions) (int, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	return UnpackTarRoot(r, root, opt)
}

// UnpackTarRoot unpacks an uncompressed tar stream into root. Every write
// goes through root, so the kernel resolves each name beneath it: no
// symbolic link (one in the archive, a chain of them, or one already in the
// folder) and no hard link can make a write land outside. On top of that
// the archive's content is held to a policy, so that a refused archive says
// which entry was refused and why:
//
//   - names are relative and without ".." (leading "./" is fine);
//   - regular files replace whatever non-folder had their name (a link of
//     that name is removed, not followed); mode bits beyond 0777 are dropped;
//   - folders are created with 0755;
//   - symbolic links are created as they are, provided their target is
//     relative and, read as text from where the link stands, stays inside.
//     That check is for the message: the confinement does not depend on it,
//     since root never follows a link out of the folder, however it is
//     reached;
//   - hard links only to a regular file already in the folder;
//   - device files, fifos and anything else are refused;
//   - every entry counts against opt.Budget as its header is read (Reader),
//     so an archive past a limit stops at the first entry past it, without
//     writing or keeping that entry; the folders a name implies count as
//     entries and names too.
//
// The first refused or failing entry ends the unpacking with an error that
// names it, and what the archive created is removed again, in reverse
// order: nothing of a refused archive is left in the folder (a file it
// replaced is not brought back).
func UnpackTarRoot(r io.Reader, root *os.Root, opt UnpackOptions) (int, error) {
	budget := opt.Budget
	if budget == nil {
		budget = NewBudget(Limits{})
	}
	u := unpacker{root: root, owner: opt.Owner, created: &[]string{}, budget: budget, folders: map[string]bool{}}
	files, err := u.unpack(NewReader(r, budget, opt.Packed))
	if err != nil {
		u.undo()
	}
	return files, err
}

func (u unpacker) unpack(tr *Reader) (int, error) {
	files := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return files, err
		}
		name, err := entryName(h.Name)
		if err == nil && name == "." && h.Typeflag != tar.TypeDir {
			err = errors.New("only a folder can stand for the folder itself")
		}
		if err == nil && name != "." {
			switch h.Typeflag {
			case tar.TypeDir:
				err = u.dir(name)
			case tar.TypeReg:
				if err = u.file(name, h, tr); err == nil {
					files++
				}
			case tar.TypeSymlink:
				err = u.symlink(name, h.Linkname)
			case tar.TypeLink:
				if err = u.hardlink(name, h.Linkname); err == nil {
					files++
				}
			case tar.TypeChar, tar.TypeBlock:
				err = errors.New("device files are not unpacked")
			case tar.TypeFifo:
				err = errors.New("fifos are not unpacked")
			default:
				err = fmt.Errorf("entries of type %q are not unpacked (only files, folders, symbolic links and hard links)", string(h.Typeflag))
			}
		}
		if err != nil {
			return files, u.refused(err, h.Name)
		}
	}
}

// refused words the error that ended the unpacking at entry name: a limit
// passed names the limit first, anything else the entry.
func (u unpacker) refused(err error, name string) error {
	var limit *LimitError
	if errors.As(err, &limit) {
		return fmt.Errorf("%w, at entry %s", limit, u.budget.Quote(name))
	}
	if errors.Is(err, ErrNoRoom) {
		return err
	}
	return fmt.Errorf("entry %s: %w", u.budget.Quote(name), Plain(err))
}

// entryName checks an archive name and cleans it ("./a/" -> "a").
func entryName(name string) (string, error) {
	if name == "" {
		return "", errors.New("an empty name")
	}
	if strings.HasPrefix(name, "/") {
		return "", errors.New("absolute paths are not unpacked")
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", errors.New("paths with .. are not unpacked")
		}
	}
	return path.Clean(name), nil
}

// ErrNoRoom marks the refusals of a node short of disk or inodes, which
// Budget.Room returns: they are passed on as they are.
var ErrNoRoom = errors.New("the node's disk is nearly full")

// Plain words os.Root's refusal, whose text ("path escapes from parent")
// would not tell an operator what the archive did.
func Plain(err error) error {
	if strings.Contains(err.Error(), "path escapes from parent") {
		return fmt.Errorf("it would be written outside the folder: a symbolic link on its way leads out (%w)", err)
	}
	return err
}

type unpacker struct {
	root  *os.Root
	owner *Owner
	// created lists what the archive created, in order, for undo; nil
	// records nothing.
	created *[]string
	// budget counts the folders mkdirAll creates, as entries: a name
	// a/b/c/.../f makes a folder of each part; nil counts nothing.
	budget *Budget
	// folders are the names known to be folders (or links to folders
	// inside), so that each entry does not look at every folder on its way
	// again: with os.Root each look walks the name from the top, which made
	// an archive of deep names cost the square of their depth per entry.
	// Only clear removes anything (never a folder), and it forgets them
	// all; nil remembers nothing.
	folders map[string]bool
}

// isFolder remembers that name is a folder.
func (u unpacker) isFolder(name string) {
	if u.folders != nil {
		u.folders[name] = true
	}
}

// made records a name the archive created.
func (u unpacker) made(name string) {
	if u.created != nil {
		*u.created = append(*u.created, name)
	}
}

// undo removes what the archive created, the last first, so each folder
// is empty when its turn comes. A name something else has since filled is
// left (Remove refuses a folder that is not empty).
func (u unpacker) undo() {
	if u.created == nil {
		return
	}
	list := *u.created
	for i := len(list) - 1; i >= 0; i-- {
		_ = u.root.Remove(list[i])
	}
	*u.created = nil
}

// lchown hands a created folder or link to the owner without following it.
func (u unpacker) lchown(name string) error {
	if u.owner == nil {
		return nil
	}
	return u.root.Lchown(name, u.owner.UID, u.owner.GID)
}

// MkdirAll creates the folders of the relative name dir in root that are
// missing, each handed to owner (nil: left to whoever creates them); an
// existing one may be a link to a folder inside. A share's folder is made
// so before its archive is unpacked into it.
func MkdirAll(root *os.Root, dir string, owner *Owner) error {
	return unpacker{root: root, owner: owner}.mkdirAll(dir)
}

// mkdirAll creates the folders of dir that are missing, each handed to the
// owner; an existing one may be a link to a folder inside.
func (u unpacker) mkdirAll(dir string) error {
	if dir == "." || u.folders[dir] {
		return nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		if u.folders[p] {
			continue
		}
		err := u.root.Mkdir(p, 0o755)
		if err == nil {
			u.made(p)
			u.isFolder(p)
			if u.budget != nil {
				if err := u.budget.name(p, true); err != nil {
					return err
				}
				if err := u.budget.entry(0); err != nil {
					return err
				}
			}
			if err := u.lchown(p); err != nil {
				return err
			}
			continue
		}
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		st, err := u.root.Stat(p)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return fmt.Errorf("%s is in the way: it is not a folder", p)
		}
		u.isFolder(p)
	}
	return nil
}

// clear removes what stands at name, unless it is a folder (an error: a
// file cannot replace a folder).
func (u unpacker) clear(name string) error {
	st, err := u.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.IsDir() {
		return errors.New("a folder of that name is in the way")
	}
	// What is removed may be a link to a folder, known as a folder.
	clear(u.folders)
	return u.root.Remove(name)
}

func (u unpacker) dir(name string) error {
	if err := u.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	if st, err := u.root.Lstat(name); err == nil && st.IsDir() {
		u.isFolder(name)
		return nil
	}
	if err := u.clear(name); err != nil {
		return err
	}
	if err := u.root.Mkdir(name, 0o755); err != nil {
		return err
	}
	u.made(name)
	u.isFolder(name)
	return u.lchown(name)
}

func (u unpacker) file(name string, h *tar.Header, r io.Reader) error {
	if err := u.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	if err := u.clear(name); err != nil {
		return err
	}
	// O_EXCL: os.Root never follows a link at the final name then, so a
	// link put there in between cannot redirect the write.
	f, err := u.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(h.Mode)&0o777|0o600)
	if err != nil {
		return err
	}
	u.made(name)
	if u.owner != nil {
		if err := f.Chown(u.owner.UID, u.owner.GID); err != nil {
			f.Close()
			return err
		}
	}
	_, err = io.CopyN(f, r, h.Size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (u unpacker) symlink(name, target string) error {
	switch {
	case target == "":
		return errors.New("a symbolic link to nothing")
	case strings.HasPrefix(target, "/"):
		return fmt.Errorf("symbolic link to %q: absolute links are not unpacked (a link must stay inside the folder)", target)
	}
	if t := path.Join(path.Dir(name), target); t == ".." || strings.HasPrefix(t, "../") {
		return fmt.Errorf("symbolic link to %q leads out of the folder", target)
	}
	if err := u.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	if err := u.clear(name); err != nil {
		return err
	}
	if err := u.root.Symlink(target, name); err != nil {
		return err
	}
	u.made(name)
	return u.lchown(name)
}

func (u unpacker) hardlink(name, target string) error {
	t, err := entryName(target)
	if err != nil {
		return fmt.Errorf("hard link to %q: %w", target, err)
	}
	if t == name {
		return errors.New("a hard link to itself")
	}
	// Lstat: the final name is not followed, as Root.Link does not follow it.
	st, err := u.root.Lstat(t)
	if err != nil {
		return fmt.Errorf("hard link to %q: %w", target, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("hard link to %q: only links to a regular file unpacked before are unpacked", target)
	}
	if err := u.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	if err := u.clear(name); err != nil {
		return err
	}
	if err := u.root.Link(t, name); err != nil {
		return err
	}
	u.made(name)
	return nil
}
