// Package capped holds files of a bounded size that keep their last bytes:
// an environment's output as the node keeps it (a container's stdout.log
// and stderr.log, a process's .envlease.log). Whatever an environment
// writes, and however much, such a file never holds more than its bound on
// the node, and reading it costs at most that.
package capped

import (
	"errors"
	"os"
	"sync"
)

// DefaultMax bounds an output file and the one before it together: 8 MiB,
// the last 4 to 8 MiB of output.
const DefaultMax = 8 << 20

// Opener opens the file for appending; with rotate it first moves the
// current one aside (to name.1, replacing the one there), so a reader finds
// the older half there. A caller inside a folder the environment can write
// opens through an os.Root, never following a link out.
type Opener func(rotate bool) (*os.File, error)

// File is an output file of at most max bytes on the node, in two halves:
// once the current one holds max/2, it is moved aside and a new one begun.
// Writes never fail: a file that cannot be written is given up, and what
// is written after is dropped.
type File struct {
	mu   sync.Mutex
	open Opener
	f    *os.File
	n    int64
	half int64
}

// New opens a capped file of max bytes (DefaultMax when 0).
func New(max int64, open Opener) (*File, error) {
	if max <= 0 {
		max = DefaultMax
	}
	f, err := open(false)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &File{open: open, f: f, n: st.Size(), half: max / 2}, nil
}

// OpenPath is the Opener of a file of a folder only the agent writes.
func OpenPath(name string) Opener {
	return func(rotate bool) (*os.File, error) {
		if rotate {
			if err := os.Rename(name, name+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
		return os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	}
}

// OpenIn is the Opener of the file name at the top of root, a folder the
// environment can write: a link or a folder planted there is replaced,
// never followed, and owner (nil: the agent) owns the file.
func OpenIn(root *os.Root, name string, chown func(*os.File) error) Opener {
	return func(rotate bool) (*os.File, error) {
		if rotate {
			_ = root.RemoveAll(name + ".1")
			if err := root.Rename(name, name+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
		if st, err := root.Lstat(name); err == nil && !st.Mode().IsRegular() {
			if err := root.RemoveAll(name); err != nil {
				return nil, err
			}
		}
		f, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		if chown != nil {
			if err := chown(f); err != nil {
				f.Close()
				return nil, err
			}
		}
		return f, nil
	}
}

// Write appends b, moving the file aside first when b would take it past
// its half. Of a write larger than a half only its last half is kept.
func (c *File) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(b)
	if c.f == nil {
		return n, nil
	}
	if int64(len(b)) > c.half {
		b = b[int64(len(b))-c.half:]
	}
	if c.n+int64(len(b)) > c.half {
		c.f.Close()
		f, err := c.open(true)
		if err != nil {
			c.f = nil
			return n, nil
		}
		c.f, c.n = f, 0
	}
	w, err := c.f.Write(b)
	c.n += int64(w)
	if err != nil {
		// Out of room or gone: what follows is dropped, not retried.
		c.f.Close()
		c.f = nil
	}
	return n, nil
}

// Close closes the current file.
func (c *File) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return nil
	}
	err := c.f.Close()
	c.f = nil
	return err
}
