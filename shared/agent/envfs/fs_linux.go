package envfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envlease/envlease/shared/envfiles"
)

// TempPrefix and TempSuffix name a write's temporary file, beside its
// target until the rename; watches do not report them.
const (
	TempPrefix = ".envlease-"
	TempSuffix = ".tmp"
)

// FS is an environment's root, open for one request.
type FS struct {
	r  Root
	fd int
}

// Open opens r's folder for one request; Close frees it.
func Open(r Root) (*FS, error) {
	fd, err := unix.Open(r.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, envfiles.Errorf(envfiles.ReasonEnvironmentGone, "the environment's files are no longer on this node")
	}
	return &FS{r: r, fd: fd}, nil
}

// Close frees the root's descriptor.
func (f *FS) Close() error { return unix.Close(f.fd) }

// asUser runs fn on a thread whose file-system user and group are the
// environment's and that holds no supplementary group, so the kernel
// checks every path and change as it would the environment's command's
// (setfsuid drops the capabilities that bypass permissions), then puts the
// thread back as it was. A thread that cannot be put back is never handed
// back to the Go runtime: its goroutine ends locked, and the thread with it.
// A panic in fn is the request's error, not the agent's end (it runs on a
// goroutine of its own, where no server's recover reaches), and the thread
// is put back, or ended, as after any fn.
func (f *FS) asUser(fn func() error) error {
	if !f.r.AsUser {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		groups, err := unix.Getgroups()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("read the agent's groups: %w", err)
			return
		}
		uid, gid := unix.Getuid(), unix.Getgid()
		if err := become(f.r.UID, f.r.GID, nil); err != nil {
			done <- err // locked: the thread ends with the goroutine
			return
		}
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("a file operation panicked: %v", p)
			}
			if become(uid, gid, groups) == nil {
				runtime.UnlockOSThread()
			}
			done <- err
		}()
		err = fn()
	}()
	return <-done
}

// become sets the calling thread's file-system user and group and its
// supplementary groups (raw, per-thread system calls), and checks them.
func become(uid, gid int, groups []int) error {
	if err := unix.Setgroups(groups); err != nil {
		return fmt.Errorf("set the thread's groups: %w", err)
	}
	_ = unix.Setfsgid(gid)
	_ = unix.Setfsuid(uid)
	// setfsuid reports no failure: check what the thread now is.
	if u, _ := unix.SetfsuidRetUid(-1); u != uid {
		return fmt.Errorf("the thread's file-system user is %d, not %d", u, uid)
	}
	if g, _ := unix.SetfsgidRetGid(-1); g != gid {
		return fmt.Errorf("the thread's file-system group is %d, not %d", g, gid)
	}
	return nil
}

// rel is abs (absolute, clean, as the environment names it) relative to
// the root, as openat2 takes it: /tmp and /var/tmp are the root's Tmp
// folder when the environment sees that there.
func (f *FS) rel(abs string) string {
	if abs == "/" {
		return "."
	}
	if f.r.Tmp != "" {
		for _, t := range []string{"/tmp", "/var/tmp"} {
			if under(abs, t) {
				return f.r.Tmp + strings.TrimPrefix(abs, t)
			}
		}
	}
	return strings.TrimPrefix(abs, "/")
}

// open resolves abs inside the root.
func (f *FS) open(abs string, flags int, mode uint32) (int, error) {
	res := uint64(unix.RESOLVE_NO_MAGICLINKS)
	if f.r.InRoot {
		res |= unix.RESOLVE_IN_ROOT
	} else {
		res |= unix.RESOLVE_BENEATH
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: res}
	for range 8 {
		fd, err := unix.Openat2(f.fd, f.rel(abs), &how)
		// EAGAIN: a rename raced the resolution; the kernel asks to retry.
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err == nil {
			// On the way to the scope or in it: a folder above the scope
			// is opened only to reach into it (reached checks the end).
			if serr := f.scoped(fd, "", false); serr != nil {
				unix.Close(fd)
				return -1, serr
			}
		}
		return fd, err
	}
	return -1, unix.EAGAIN
}

// reached refuses name in the folder fd ("" for fd itself) unless the
// kernel resolved it at or below the request's scope (Root.Scope).
func (f *FS) reached(fd int, name string) error { return f.scoped(fd, name, true) }

// scoped checks where fd (and name in it) resolved against Root.Scope:
// at or below it, or with !end also a folder above it.
func (f *FS) scoped(fd int, name string, end bool) error {
	scope := f.r.Scope
	if scope == "" || scope == "/" {
		return nil
	}
	at, err := f.inside(fd)
	if err != nil {
		return err
	}
	for _, p := range f.seen(path.Join(at, name)) {
		if under(p, scope) || !end && under(scope, p) {
			return nil
		}
	}
	return envfiles.Errorf(envfiles.ReasonOutsideTicket, "a symbolic link on the path leads out of %s, which the ticket opens", scope)
}

// seen are the names the environment knows the node-relative path p by:
// itself, or /tmp and /var/tmp for what is below the root's Tmp folder.
func (f *FS) seen(p string) []string {
	if f.r.Tmp != "" {
		t := "/" + strings.Trim(f.r.Tmp, "/")
		if under(p, t) {
			rest := strings.TrimPrefix(p, t)
			return []string{"/tmp" + rest, "/var/tmp" + rest}
		}
	}
	return []string{p}
}

// parent opens the folder that holds abs (not the root) as a path.
func (f *FS) parent(abs string) (int, string, error) {
	if abs == "/" {
		return -1, "", envfiles.Errorf(envfiles.ReasonBadPath, "/ is the environment's root: it has no folder to be changed in")
	}
	dir, name := path.Split(abs)
	fd, err := f.open(path.Clean(dir), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", mapErr(path.Clean(dir), err)
	}
	if err := f.reached(fd, name); err != nil {
		unix.Close(fd)
		return -1, "", err
	}
	return fd, name, nil
}

// inside is where the kernel resolved fd to, as the environment names it.
func (f *FS) inside(fd int) (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	root := strings.TrimSuffix(f.r.Dir, "/")
	if p == root {
		return "/", nil
	}
	if !strings.HasPrefix(p, root+"/") {
		return "", envfiles.Errorf(envfiles.ReasonOutsideRoot, "the path leads out of the environment")
	}
	return p[len(root):], nil
}

// writableDir refuses a change in the folder fd unless the environment
// may write there: checked where the kernel resolved the folder, not on
// the name asked for, so no link leads a change onto a read-only path.
func (f *FS) writableDir(fd int, asked string) error {
	at, err := f.inside(fd)
	if err != nil {
		return err
	}
	if !f.r.writable(at) {
		return envfiles.Errorf(envfiles.ReasonReadOnly, "%s is read-only in this environment: it writes only below %s", asked, strings.Join(f.r.Writable, ", "))
	}
	return nil
}

// mapErr turns a system error about p into the endpoint's.
func mapErr(p string, err error) error {
	if err == nil {
		return nil
	}
	var e *envfiles.Error
	if errors.As(err, &e) {
		return err
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return envfiles.Errorf(envfiles.ReasonInternal, "%s: %v", p, err)
	}
	switch errno {
	case unix.EXDEV, unix.ELOOP:
		return envfiles.Errorf(envfiles.ReasonOutsideRoot, "%s: a symbolic link on the path leads out of the environment (or through /proc)", p)
	case unix.ENOENT:
		return envfiles.Errorf(envfiles.ReasonNotFound, "%s: no such file or folder", p)
	case unix.EACCES, unix.EPERM:
		return envfiles.Errorf(envfiles.ReasonPermission, "%s: permission denied to the environment's user", p)
	case unix.EROFS:
		return envfiles.Errorf(envfiles.ReasonReadOnly, "%s is on a read-only file system", p)
	case unix.ENOTDIR:
		return envfiles.Errorf(envfiles.ReasonNotDir, "%s: a part of the path is not a folder", p)
	case unix.EISDIR:
		return envfiles.Errorf(envfiles.ReasonIsDir, "%s is a folder", p)
	case unix.ENOTEMPTY:
		return envfiles.Errorf(envfiles.ReasonNotEmpty, "%s is a folder that is not empty (remove it recursively)", p)
	case unix.EEXIST:
		return envfiles.Errorf(envfiles.ReasonExists, "%s exists", p)
	case unix.ENOSPC, unix.EDQUOT:
		return envfiles.Errorf(envfiles.ReasonOutOfDisk, "%s: the environment's disk is full", p)
	case unix.ENAMETOOLONG:
		return envfiles.Errorf(envfiles.ReasonBadPath, "%s: a name is too long", p)
	case unix.ENOSYS:
		return envfiles.Errorf(envfiles.ReasonInternal, "the node's kernel has no openat2 (Linux 5.6 or later)")
	}
	return envfiles.Errorf(envfiles.ReasonInternal, "%s: %v", p, errno)
}

// info describes st, found at abs.
func info(abs string, st *unix.Stat_t) envfiles.FileInfo {
	mode := fs.FileMode(st.Mode & 0o777)
	if st.Mode&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	typ := envfiles.TypeOther
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		typ = envfiles.TypeFile
	case unix.S_IFDIR:
		typ = envfiles.TypeDir
	case unix.S_IFLNK:
		typ = envfiles.TypeSymlink
	}
	name := path.Base(abs)
	return envfiles.FileInfo{Name: name, Path: abs, Type: typ, Size: st.Size, Mode: envfiles.FormatMode(mode),
		Modified: time.Unix(st.Mtim.Unix()).UTC()}
}

// statAt describes name in the folder dirfd, links not followed.
func statAt(dirfd int, name, abs string) (envfiles.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return envfiles.FileInfo{}, err
	}
	fi := info(abs, &st)
	if fi.Type == envfiles.TypeSymlink {
		buf := make([]byte, 4096)
		if n, err := unix.Readlinkat(dirfd, name, buf); err == nil {
			fi.Target = string(buf[:n])
		}
	}
	return fi, nil
}

// Stat describes the entry at p; a link at its end is not followed.
func (f *FS) Stat(p string) (envfiles.FileInfo, error) {
	abs, err := f.r.Clean(p)
	if err != nil {
		return envfiles.FileInfo{}, err
	}
	var fi envfiles.FileInfo
	err = f.asUser(func() error {
		if abs == "/" {
			var st unix.Stat_t
			if err := unix.Fstat(f.fd, &st); err != nil {
				return mapErr(abs, err)
			}
			fi = info("/", &st)
			return nil
		}
		dfd, name, err := f.parent(abs)
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		fi, err = statAt(dfd, name, abs)
		return mapErr(abs, err)
	})
	if err != nil {
		return envfiles.FileInfo{}, mapErr(abs, err)
	}
	return fi, nil
}

// OpenFile opens the regular file at p for reading (links followed within
// the root) and describes it.
func (f *FS) OpenFile(p string) (*os.File, envfiles.FileInfo, error) {
	abs, err := f.r.Clean(p)
	if err != nil {
		return nil, envfiles.FileInfo{}, err
	}
	var fd int
	var fi envfiles.FileInfo
	err = f.asUser(func() error {
		var err error
		// O_NONBLOCK: a FIFO does not hold the request; it is refused below.
		fd, err = f.open(abs, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
		if err != nil {
			return mapErr(abs, err)
		}
		if err := f.reached(fd, ""); err != nil {
			unix.Close(fd)
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return mapErr(abs, err)
		}
		fi = info(abs, &st)
		switch fi.Type {
		case envfiles.TypeFile:
			return nil
		case envfiles.TypeDir:
			unix.Close(fd)
			return envfiles.Errorf(envfiles.ReasonIsDir, "%s is a folder: list it", abs)
		}
		unix.Close(fd)
		return envfiles.Errorf(envfiles.ReasonBadPath, "%s is not a regular file", abs)
	})
	if err != nil {
		return nil, envfiles.FileInfo{}, err
	}
	_ = unix.SetNonblock(fd, false)
	return os.NewFile(uintptr(fd), abs), fi, nil
}

// List lists the folder at p: at most envfiles.MaxList entries, sorted.
func (f *FS) List(p string) (envfiles.FileList, error) {
	abs, err := f.r.Clean(p)
	if err != nil {
		return envfiles.FileList{}, err
	}
	out := envfiles.FileList{Path: abs, Entries: []envfiles.FileInfo{}}
	err = f.asUser(func() error {
		fd, err := f.open(abs, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return mapErr(abs, err)
		}
		d := os.NewFile(uintptr(fd), abs)
		defer d.Close()
		if err := f.reached(fd, ""); err != nil {
			return err
		}
		names, err := d.Readdirnames(envfiles.MaxList + 1)
		if err != nil && err != io.EOF {
			return mapErr(abs, err)
		}
		if len(names) > envfiles.MaxList {
			names, out.Truncated = names[:envfiles.MaxList], true
		}
		sort.Strings(names)
		for _, n := range names {
			fi, err := statAt(fd, n, path.Join(abs, n))
			if err != nil {
				continue // removed meanwhile
			}
			out.Entries = append(out.Entries, fi)
		}
		return nil
	})
	return out, err
}

// mkdirAll makes the folders of abs that are missing, each in a folder the
// environment may write, and returns abs's folder opened as a path.
func (f *FS) mkdirAll(abs string, mode uint32) (int, error) {
	fd, err := f.open(abs, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err == nil {
		return fd, nil
	}
	if err != unix.ENOENT || abs == "/" {
		return -1, mapErr(abs, err)
	}
	pfd, err := f.mkdirAll(path.Dir(abs), mode)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	if err := f.writableDir(pfd, abs); err != nil {
		return -1, err
	}
	if err := f.scoped(pfd, path.Base(abs), false); err != nil {
		return -1, err
	}
	if err := unix.Mkdirat(pfd, path.Base(abs), mode); err != nil && err != unix.EEXIST {
		return -1, mapErr(abs, err)
	}
	fd, err = f.open(abs, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, mapErr(abs, err)
	}
	return fd, nil
}

// Mkdir makes the folder p; with parents, its missing parents too, and an
// existing folder is no error.
func (f *FS) Mkdir(p string, mode fs.FileMode, parents bool) (envfiles.FileInfo, error) {
	abs, err := f.r.Clean(p)
	if err != nil {
		return envfiles.FileInfo{}, err
	}
	var fi envfiles.FileInfo
	err = f.asUser(func() error {
		if parents {
			fd, err := f.mkdirAll(abs, unixMode(mode))
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			if err := f.reached(fd, ""); err != nil {
				return err
			}
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return mapErr(abs, err)
			}
			fi = info(abs, &st)
			return nil
		}
		dfd, name, err := f.parent(abs)
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		if err := f.writableDir(dfd, abs); err != nil {
			return err
		}
		if err := unix.Mkdirat(dfd, name, unixMode(mode)); err != nil {
			return mapErr(abs, err)
		}
		fi, err = statAt(dfd, name, abs)
		return mapErr(abs, err)
	})
	return fi, err
}

// unixMode is m as open and mkdir take it.
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		u |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		u |= unix.S_ISVTX
	}
	return u
}

// Write replaces the file at p with what r holds, atomically: a temporary
// file beside it, made as the environment's user, filled, given its mode
// (mode, or the replaced file's if nil, or 0644) and renamed over it. A
// failure at any point leaves the old file as it was, and no temporary.
// The bytes go through one buffer of buf's size, whatever r's length.
func (f *FS) Write(p string, r io.Reader, mode *fs.FileMode, parents bool, buf []byte) (envfiles.FileInfo, error) {
	abs, err := f.r.Clean(p)
	if err != nil {
		return envfiles.FileInfo{}, err
	}
	if abs == "/" {
		return envfiles.FileInfo{}, envfiles.Errorf(envfiles.ReasonIsDir, "/ is a folder")
	}
	dir, name := path.Split(abs)
	dir = path.Clean(dir)
	var dfd, tfd int = -1, -1
	tmp := TempPrefix + randomName() + TempSuffix
	perm := uint32(0o644)
	err = f.asUser(func() error {
		var err error
		if parents {
			dfd, err = f.mkdirAll(dir, 0o755)
		} else {
			dfd, err = f.open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
			err = mapErr(dir, err)
		}
		if err != nil {
			return err
		}
		if err := f.writableDir(dfd, abs); err != nil {
			return err
		}
		if err := f.reached(dfd, name); err != nil {
			return err
		}
		var st unix.Stat_t
		switch err := unix.Fstatat(dfd, name, &st, 0); {
		case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
			return envfiles.Errorf(envfiles.ReasonIsDir, "%s is a folder", abs)
		case err == nil:
			perm = st.Mode & 0o7777
		}
		if mode != nil {
			perm = unixMode(*mode)
		}
		tfd, err = unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		return mapErr(abs, err)
	})
	if err != nil {
		if dfd >= 0 {
			unix.Close(dfd)
		}
		return envfiles.FileInfo{}, err
	}
	defer unix.Close(dfd)
	file := os.NewFile(uintptr(tfd), tmp)
	done := false
	defer func() {
		if !done {
			_ = unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	_, err = io.CopyBuffer(onlyWriter{file}, onlyReader{r}, buf)
	if err != nil {
		file.Close()
		var errno unix.Errno
		if errors.As(err, &errno) {
			return envfiles.FileInfo{}, mapErr(abs, errno)
		}
		return envfiles.FileInfo{}, err
	}
	var fi envfiles.FileInfo
	err = f.asUser(func() error {
		if err := unix.Fchmod(int(file.Fd()), perm); err != nil {
			return mapErr(abs, err)
		}
		if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
			return mapErr(abs, err)
		}
		done = true
		var st unix.Stat_t
		if err := unix.Fstat(int(file.Fd()), &st); err != nil {
			return mapErr(abs, err)
		}
		fi = info(abs, &st)
		return nil
	})
	if cerr := file.Close(); err == nil && cerr != nil {
		err = mapErr(abs, cerr)
	}
	return fi, err
}

// onlyWriter and onlyReader hide ReadFrom and WriteTo, so the copy goes
// through the one buffer it is given.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }

type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func randomName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Remove removes the file, link or empty folder at p; with recursive, a
// folder and everything below it (never following a link).
func (f *FS) Remove(p string, recursive bool) error {
	abs, err := f.r.Clean(p)
	if err != nil {
		return err
	}
	if abs == "/" {
		return envfiles.Errorf(envfiles.ReasonBadPath, "/ is the environment's root: it cannot be removed")
	}
	return f.asUser(func() error {
		dfd, name, err := f.parent(abs)
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		if err := f.writableDir(dfd, abs); err != nil {
			return err
		}
		err = unix.Unlinkat(dfd, name, 0)
		if err == unix.EISDIR || err == unix.EPERM {
			var st unix.Stat_t
			if serr := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); serr == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if recursive {
					return mapErr(abs, removeAll(dfd, name))
				}
				err = unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
			}
		}
		return mapErr(abs, err)
	})
}

// removeAll removes name in dirfd and all below it, through descriptors
// only (no path is resolved twice, no link followed).
func removeAll(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	fd, oerr := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if oerr != nil {
		if oerr == unix.ENOTDIR || oerr == unix.ELOOP {
			return err
		}
		return oerr
	}
	d := os.NewFile(uintptr(fd), name)
	for {
		names, rerr := d.Readdirnames(256)
		for _, n := range names {
			if err := removeAll(fd, n); err != nil {
				d.Close()
				return err
			}
		}
		if rerr != nil || len(names) == 0 {
			break
		}
	}
	d.Close()
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}
