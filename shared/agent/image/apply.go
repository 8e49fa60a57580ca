// Package image gives a node the root filesystems of OCI images: it pulls
// an image from a registry (with the node's own registry credentials) or
// reads an OCI image archive, applies its layers through a confined applier
// and keeps the unpacked root filesystems in a cache by digest, bounded in
// size and evicted least recently used. See docs/nodes.md, "Images".
package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/envlease/envlease/shared/agent/archive"
)

// Default limits of one image: what all its layers together may unpack to,
// and the names they may hold (one name, all of them: an opaque whiteout
// keeps the names of its layer in memory). 256 MiB of names is a million
// names of 256 bytes.
const (
	DefaultMaxBytes      = 16 << 30
	DefaultMaxEntries    = 1 << 20
	DefaultMaxNameBytes  = archive.DefaultMaxNameBytes
	DefaultMaxNamesBytes = 256 << 20
)

// DefaultIDs is how many ids a container's user namespace maps: the owners
// a layer may give its entries are 0 to DefaultIDs-1.
const DefaultIDs = 65536

const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// ApplyOptions tune an Applier.
type ApplyOptions struct {
	// MaxBytes bounds the regular files' bytes of all layers applied by one
	// Applier (default DefaultMaxBytes), MaxEntries their entries, whiteouts
	// included (default DefaultMaxEntries).
	MaxBytes   int64
	MaxEntries int
	// Owners keeps the archive's owners (uid and gid), shifted by IDShift
	// (the first host id of a user namespace's mapping). Only root may. An
	// owner must be one of the IDs ids the container maps (0 to IDs-1,
	// default DefaultIDs): an entry of another owner is refused, so no
	// layer can give the node's files an id outside the container's range
	// (a PAX uid of 2^32 - 1,000,000 plus the shift would wrap to the
	// node's root), and a set-uid bit, reapplied after the owner, can only
	// ever be of an id of the container's own.
	Owners  bool
	IDShift int
	IDs     int
	// Devices creates character and block devices; without it they are
	// skipped (counted in Stats.Skipped): only root may create them, and a
	// container gets its devices from its runtime spec anyway.
	Devices bool
	// filesOnly refuses everything but files and folders (for archives
	// read by code that follows links, not for layers).
	filesOnly bool
}

// Stats says what an Applier wrote.
type Stats struct {
	Entries int   // entries read, whiteouts included
	Bytes   int64 // bytes of regular files
	Skipped int   // device nodes not created
}

// Applier applies image layers, in order, into one folder. Every write goes
// through an os.Root, so the kernel resolves each name beneath the folder: no
// symbolic link (one of an earlier layer, an absolute one, a chain) can make a
// write land outside, and a name with ".." is refused outright. Unlike the
// agent's share unpacker, a layer is a root filesystem: absolute symbolic
// links, set-uid bits, fifos and owners are kept (they mean something inside
// the container), whiteouts remove what earlier layers wrote, and a file may
// replace a folder.
type Applier struct {
	root  *os.Root
	opt   ApplyOptions
	stats Stats
	// seen holds the names the current layer wrote, so that an opaque
	// whiteout clears only what earlier layers left in its folder.
	seen map[string]bool
	// names holds every name of the image's layers to the name limits as
	// its header is read (archive.Reader), before it is kept in seen.
	names *archive.Budget
}

// NewApplier applies layers into root.
func NewApplier(root *os.Root, opt ApplyOptions) *Applier {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	if opt.MaxEntries <= 0 {
		opt.MaxEntries = DefaultMaxEntries
	}
	if opt.IDs <= 0 {
		opt.IDs = DefaultIDs
	}
	names := archive.NewBudget(archive.Limits{MaxNameBytes: DefaultMaxNameBytes, MaxNamesBytes: DefaultMaxNamesBytes}).Fixed()
	return &Applier{root: root, opt: opt, names: names}
}

// Stats says what was written so far.
func (a *Applier) Stats() Stats { return a.stats }

// Apply applies one uncompressed layer. The first refused or failing entry
// ends it with an error that names the entry; the caller discards the folder.
func (a *Applier) Apply(r io.Reader) error {
	a.seen = map[string]bool{}
	tr := archive.NewNameReader(r, a.names)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag == tar.TypeXHeader {
			continue
		}
		if a.stats.Entries++; a.stats.Entries > a.opt.MaxEntries {
			return fmt.Errorf("the image has more than %d entries", a.opt.MaxEntries)
		}
		if err := a.entry(h, tr); err != nil {
			return fmt.Errorf("entry %q: %w", h.Name, plain(err))
		}
	}
}

func (a *Applier) entry(h *tar.Header, r io.Reader) error {
	name, err := layerName(h.Name)
	if err != nil {
		return err
	}
	if err := a.ownerInRange(h); err != nil {
		return err
	}
	if name == "." {
		if h.Typeflag != tar.TypeDir {
			return errors.New("only a folder can stand for the root")
		}
		return a.attrs(".", h)
	}
	dir, base := path.Split(name)
	dir = path.Clean(dir)
	if strings.HasPrefix(base, whiteoutPrefix) && !a.opt.filesOnly {
		return a.whiteout(dir, base)
	}
	if err := a.parents(dir); err != nil {
		return err
	}
	// The folders on the way count as written by this layer too: an
	// opaque marker after "a/b/c" must keep "a/b".
	for p := name; p != "."; p = path.Dir(p) {
		a.seen[p] = true
	}
	if a.opt.filesOnly && h.Typeflag != tar.TypeDir && h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeRegA {
		return errors.New("only files and folders are read from an image archive")
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return a.dir(name, h)
	case tar.TypeReg, tar.TypeRegA:
		return a.file(name, h, r)
	case tar.TypeSymlink:
		if h.Linkname == "" {
			return errors.New("a symbolic link to nothing")
		}
		if err := a.clear(name); err != nil {
			return err
		}
		if err := a.root.Symlink(h.Linkname, name); err != nil {
			return err
		}
		return a.owner(name, h, true)
	case tar.TypeLink:
		return a.hardlink(name, h.Linkname)
	case tar.TypeChar, tar.TypeBlock:
		if !a.opt.Devices {
			a.stats.Skipped++
			return nil
		}
		return a.node(name, h)
	case tar.TypeFifo:
		return a.node(name, h)
	default:
		return fmt.Errorf("entries of type %q are not applied", string(h.Typeflag))
	}
}

// layerName checks a layer's entry name and cleans it ("./a/" -> "a"). A
// leading "/" is dropped, as image builders write some that way.
func layerName(name string) (string, error) {
	if name == "" {
		return "", errors.New("an empty name")
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", errors.New("paths with .. are not applied")
		}
	}
	n := path.Clean("/" + name)
	if n == "/" {
		return ".", nil
	}
	return n[1:], nil
}

// plain words os.Root's refusal, whose text ("path escapes from parent")
// would not tell an operator what the layer did.
func plain(err error) error {
	if strings.Contains(err.Error(), "path escapes from parent") {
		return fmt.Errorf("it would be written outside the root filesystem: a symbolic link on its way leads out (%w)", err)
	}
	return err
}

// whiteout removes what earlier layers wrote: ".wh.NAME" removes NAME, the
// opaque marker empties its folder of everything this layer did not write.
func (a *Applier) whiteout(dir, base string) error {
	if base == whiteoutOpaque {
		if err := a.parents(dir); err != nil {
			return err
		}
		if err := a.dirHere(dir); err != nil {
			return err
		}
		f, err := a.root.Open(dir)
		if err != nil {
			return err
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return err
		}
		for _, n := range names {
			p := path.Join(dir, n)
			if !a.seen[p] {
				if err := a.root.RemoveAll(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	target := strings.TrimPrefix(base, whiteoutPrefix)
	if target == "" || target == "." || target == ".." {
		return fmt.Errorf("a whiteout of %q", target)
	}
	if err := a.root.RemoveAll(path.Join(dir, target)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// parents creates the missing folders of dir (0755, as image builders leave
// implied folders).
func (a *Applier) parents(dir string) error {
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		if err := a.root.Mkdir(p, 0o755); err == nil || !errors.Is(err, fs.ErrExist) {
			if err != nil {
				return err
			}
			if a.opt.Owners {
				// The image's root owns a folder it implied.
				if err := a.root.Lchown(p, a.opt.IDShift, a.opt.IDShift); err != nil {
					return err
				}
			}
			continue
		}
		st, err := a.root.Stat(p)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return fmt.Errorf("%s is in the way: it is not a folder", p)
		}
	}
	return nil
}

// dirHere makes sure dir is a folder.
func (a *Applier) dirHere(dir string) error {
	if dir == "." {
		return nil
	}
	st, err := a.root.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	return nil
}

// clear removes whatever has name, folders included (a later layer's file
// replaces an earlier layer's folder).
func (a *Applier) clear(name string) error {
	if err := a.root.RemoveAll(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (a *Applier) dir(name string, h *tar.Header) error {
	st, err := a.root.Lstat(name)
	switch {
	case err == nil && st.IsDir():
	case err == nil || errors.Is(err, fs.ErrNotExist):
		if err := a.clear(name); err != nil {
			return err
		}
		if err := a.root.Mkdir(name, 0o700); err != nil {
			return err
		}
	default:
		return err
	}
	return a.attrs(name, h)
}

// attrs gives a folder or file its mode and owner.
func (a *Applier) attrs(name string, h *tar.Header) error {
	if err := a.owner(name, h, false); err != nil {
		return err
	}
	// After the owner: chown drops set-uid bits.
	return a.root.Chmod(name, mode(h))
}

// ownerInRange refuses an entry whose owner is not one of the container's
// ids, when owners are kept.
func (a *Applier) ownerInRange(h *tar.Header) error {
	if !a.opt.Owners {
		return nil
	}
	if h.Uid < 0 || h.Uid >= a.opt.IDs || h.Gid < 0 || h.Gid >= a.opt.IDs {
		return fmt.Errorf("its owner %d:%d is outside the container's ids 0-%d", h.Uid, h.Gid, a.opt.IDs-1)
	}
	return nil
}

func (a *Applier) owner(name string, h *tar.Header, link bool) error {
	if !a.opt.Owners {
		return nil
	}
	uid, gid := h.Uid+a.opt.IDShift, h.Gid+a.opt.IDShift
	if link {
		return a.root.Lchown(name, uid, gid)
	}
	return a.root.Chown(name, uid, gid)
}

// mode turns a header's mode into an os.FileMode with set-uid, set-gid and
// sticky bits.
func mode(h *tar.Header) fs.FileMode {
	m := fs.FileMode(h.Mode) & fs.ModePerm
	if h.Mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if h.Mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if h.Mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

func (a *Applier) file(name string, h *tar.Header, r io.Reader) error {
	if a.stats.Bytes += h.Size; a.stats.Bytes > a.opt.MaxBytes {
		return fmt.Errorf("the image unpacks to more than %d bytes", a.opt.MaxBytes)
	}
	if err := a.clear(name); err != nil {
		return err
	}
	// O_EXCL: os.Root never follows a link at the final name then.
	f, err := a.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.CopyN(f, r, h.Size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := a.attrs(name, h); err != nil {
		return err
	}
	return a.root.Chtimes(name, h.ModTime, h.ModTime)
}

func (a *Applier) hardlink(name, target string) error {
	t, err := layerName(target)
	if err != nil {
		return fmt.Errorf("hard link to %q: %w", target, err)
	}
	if t == name {
		return errors.New("a hard link to itself")
	}
	st, err := a.root.Lstat(t)
	if err != nil {
		return fmt.Errorf("hard link to %q: %w", target, err)
	}
	if st.IsDir() {
		return fmt.Errorf("hard link to %q: a folder", target)
	}
	if err := a.clear(name); err != nil {
		return err
	}
	return a.root.Link(t, name)
}

// node creates a fifo or a device through its parent folder's descriptor,
// opened beneath the root, so that the name it creates is a plain name in a
// folder already inside.
func (a *Applier) node(name string, h *tar.Header) error {
	if err := a.clear(name); err != nil {
		return err
	}
	dir, base := path.Split(name)
	d, err := a.root.Open(path.Clean(dir))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := mknodAt(d, base, h); err != nil {
		return err
	}
	return a.attrs(name, h)
}
