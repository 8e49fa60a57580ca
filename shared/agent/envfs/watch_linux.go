package envfs

import (
	"bytes"
	"context"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/envlease/envlease/shared/envfiles"
)

// MaxWatchFolders bounds the folders one recursive watch holds: each is an
// inotify watch of the node's (a kernel-wide, per-user bound).
const MaxWatchFolders = 1024

// writeCoalesce is how close two writes of one file are reported as one.
const writeCoalesce = 100 * time.Millisecond

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// Watcher reports the changes of a folder (and, recursive, its folders).
type Watcher struct {
	fs        *FS
	file      *os.File
	top       int
	recursive bool
	mu        sync.Mutex
	wds       map[int]string
	lastWrite map[string]time.Time
}

// Watch starts watching the folder at p. The folder is opened as the
// environment's user (it must be able to read it), and the kernel's watch
// is put on what that opened, so no link or rename leads it elsewhere.
func (f *FS) Watch(p string, recursive bool) (*Watcher, error) {
	abs, err := f.r.Clean(p)
	if err != nil {
		return nil, err
	}
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, mapErr(abs, err)
	}
	w := &Watcher{fs: f, file: os.NewFile(uintptr(ifd), "inotify"), recursive: recursive, wds: map[int]string{}, lastWrite: map[string]time.Time{}}
	top, err := w.add(abs)
	if err != nil {
		w.file.Close()
		return nil, err
	}
	w.top = top
	return w, nil
}

// readBatch is how many names of a folder a recursive watch reads at once:
// a folder of a million files costs the agent one batch of memory, not a
// million names.
const readBatch = 256

// add watches the folder abs, and with recursive the folders below it,
// breadth first: what it holds at once is one folder's batch of names and
// the folders still to watch, bounded by MaxWatchFolders.
func (w *Watcher) add(abs string) (int, error) {
	top := -1
	err := w.fs.asUser(func() error {
		queue := []string{abs}
		for len(queue) > 0 {
			next := queue[0]
			queue = queue[1:]
			if err := w.watchOne(next, &top, &queue); err != nil {
				return err
			}
		}
		return nil
	})
	return top, err
}

// watchOne watches the folder abs and, recursive, queues the folders it
// holds; top takes the first watch made.
func (w *Watcher) watchOne(abs string, top *int, queue *[]string) error {
	fd, err := w.fs.open(abs, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return mapErr(abs, err)
	}
	d := os.NewFile(uintptr(fd), abs)
	defer d.Close()
	if err := w.fs.reached(fd, ""); err != nil {
		return err
	}
	w.mu.Lock()
	n := len(w.wds)
	w.mu.Unlock()
	if n >= MaxWatchFolders {
		return tooManyFolders()
	}
	wd, err := unix.InotifyAddWatch(int(w.file.Fd()), "/proc/self/fd/"+strconv.Itoa(fd), watchMask)
	if err != nil {
		return mapErr(abs, err)
	}
	if *top < 0 {
		*top = wd
	}
	w.mu.Lock()
	w.wds[wd] = abs
	n = len(w.wds)
	w.mu.Unlock()
	if !w.recursive {
		return nil
	}
	for {
		names, rerr := d.Readdirnames(readBatch)
		for _, name := range names {
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				continue
			}
			if n+len(*queue) >= MaxWatchFolders {
				return tooManyFolders()
			}
			*queue = append(*queue, path.Join(abs, name))
		}
		if rerr != nil || len(names) == 0 {
			// The end of the folder, or it went: what was read is watched.
			return nil
		}
	}
}

func tooManyFolders() error {
	return envfiles.Errorf(envfiles.ReasonTooManyFolders, "a watch holds at most %d folders", MaxWatchFolders)
}

// Close ends the watch.
func (w *Watcher) Close() error { return w.file.Close() }

// Run sends the changes until ctx ends (""), send fails (""), or the
// watched folder goes (the reason).
func (w *Watcher) Run(ctx context.Context, send func(envfiles.FileChange) error) string {
	stop := context.AfterFunc(ctx, func() { w.file.Close() })
	defer stop()
	buf := make([]byte, 64<<10)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			return ""
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			c, end := w.change(int(ev.Wd), ev.Mask, string(name))
			if end != "" {
				return end
			}
			if c == nil {
				continue
			}
			if err := send(*c); err != nil {
				return ""
			}
		}
	}
}

// change is what one inotify event says, nil for nothing to report; end
// is set when the watched folder went.
func (w *Watcher) change(wd int, mask uint32, name string) (*envfiles.FileChange, string) {
	now := time.Now().UTC()
	if mask&unix.IN_Q_OVERFLOW != 0 {
		return &envfiles.FileChange{Op: envfiles.OpOverflow, Time: &now}, ""
	}
	w.mu.Lock()
	dir, ok := w.wds[wd]
	if mask&unix.IN_IGNORED != 0 {
		delete(w.wds, wd)
	}
	w.mu.Unlock()
	if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0 {
		if wd == w.top {
			return nil, "the folder was removed or moved"
		}
		return nil, ""
	}
	if !ok || name == "" {
		return nil, ""
	}
	// A write through the endpoint shows as the file it replaced, never
	// as its temporary.
	if strings.HasPrefix(name, TempPrefix) && strings.HasSuffix(name, TempSuffix) {
		return nil, ""
	}
	p := path.Join(dir, name)
	typ := envfiles.TypeFile
	if mask&unix.IN_ISDIR != 0 {
		typ = envfiles.TypeDir
	}
	c := &envfiles.FileChange{Path: p, Type: typ, Time: &now}
	switch {
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		c.Op = envfiles.OpCreate
		if typ == envfiles.TypeDir && w.recursive {
			// A failure to watch it (too many folders) ends nothing
			// already watched; its changes are not reported.
			_, _ = w.add(p)
		}
	case mask&unix.IN_MODIFY != 0:
		if t, ok := w.lastWrite[p]; ok && now.Sub(t) < writeCoalesce {
			return nil, ""
		}
		if len(w.lastWrite) > 4096 {
			clear(w.lastWrite)
		}
		w.lastWrite[p] = now
		c.Op = envfiles.OpWrite
	case mask&unix.IN_DELETE != 0:
		c.Op = envfiles.OpRemove
	case mask&unix.IN_MOVED_FROM != 0:
		c.Op = envfiles.OpRename
	case mask&unix.IN_ATTRIB != 0:
		c.Op = envfiles.OpChmod
	default:
		return nil, ""
	}
	return c, ""
}
