// Package buildcache keeps the build caches of templates with buildCache:
// a folder per organization and template that outlives its environments on
// the node, so the next environment of that template finds what the last
// one downloaded or built (package managers' caches, compiler outputs).
//
// A cache is a slot folder under <dir>/<key>/, where key names the
// organization and the template (a hash: never shared between
// organizations). One environment at a time holds a slot: a second
// environment of the same organization and template that starts while the
// first runs gets another slot (empty the first time), which is kept too;
// each environment is then handed the slot released last. The slots
// together are held to a number of bytes: when an environment gives its
// slot back and they hold more, the slots no environment holds are
// removed, least recently used first.
package buildcache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"
)

// DefaultMaxBytes bounds the caches of a node unless told otherwise.
const DefaultMaxBytes = 10 << 30

// Options configure a Cache.
type Options struct {
	// Dir holds the caches; it is created, and every folder on the way to
	// a slot lets others search it (environments' users reach their slot).
	Dir string
	// MaxBytes bounds what the slots hold together (default
	// DefaultMaxBytes).
	MaxBytes int64
	Log      *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Cache is a node's build caches.
type Cache struct {
	opt Options

	mu    sync.Mutex
	slots map[string]*slot // by path
	next  int
}

type slot struct {
	key, path string
	bytes     int64
	lastUsed  time.Time
	inUse     bool
	owner     Owner
}

// Owner is who a slot's files belong to: the environment's user.
type Owner struct{ UID, GID int }

// Open opens the caches in opt.Dir, keeping what an earlier run of the
// agent left there (its last use is then the folder's modification time).
func Open(opt Options) (*Cache, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if err := os.MkdirAll(opt.Dir, 0o711); err != nil {
		return nil, err
	}
	if err := os.Chmod(opt.Dir, 0o711); err != nil {
		return nil, err
	}
	c := &Cache{opt: opt, slots: map[string]*slot{}}
	keys, _ := os.ReadDir(opt.Dir)
	for _, k := range keys {
		if !k.IsDir() {
			continue
		}
		slots, _ := os.ReadDir(filepath.Join(opt.Dir, k.Name()))
		for _, s := range slots {
			p := filepath.Join(opt.Dir, k.Name(), s.Name())
			st, err := os.Lstat(p)
			if err != nil || !st.IsDir() {
				continue
			}
			n, _ := strconv.Atoi(s.Name())
			c.next = max(c.next, n+1)
			c.slots[p] = &slot{key: k.Name(), path: p, bytes: size(p), lastUsed: st.ModTime(), owner: ownerOf(st)}
		}
	}
	c.mu.Lock()
	c.evict()
	c.mu.Unlock()
	return c, nil
}

// Key names the cache of an organization's template.
func Key(org, template string) string {
	h := sha256.Sum256([]byte(org + "\x00" + template))
	return hex.EncodeToString(h[:12])
}

// Lease is one environment's hold on a slot.
type Lease struct {
	c    *Cache
	s    *slot
	once sync.Once
}

// Path is the slot's folder on the node.
func (l *Lease) Path() string { return l.s.path }

// Checkout gives an environment of org's template a slot: the one of its
// key released last that no environment holds, else a new one. The slot
// and everything in it is handed to owner (a user id is lent to one
// environment at a time, so the last one's files are changed over).
func (c *Cache) Checkout(org, template string, owner Owner) (*Lease, error) {
	if org == "" || template == "" {
		return nil, errors.New("build cache: the organization and the template are needed")
	}
	key := Key(org, template)
	c.mu.Lock()
	var pick *slot
	for _, s := range c.slots {
		if s.key == key && !s.inUse && (pick == nil || s.lastUsed.After(pick.lastUsed)) {
			pick = s
		}
	}
	if pick == nil {
		dir := filepath.Join(c.opt.Dir, key)
		pick = &slot{key: key, path: filepath.Join(dir, strconv.Itoa(c.next)), lastUsed: c.opt.Now(), owner: Owner{-1, -1}}
		c.next++
		if err := os.MkdirAll(dir, 0o711); err != nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("build cache: %w", err)
		}
		if err := os.Mkdir(pick.path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			c.mu.Unlock()
			return nil, fmt.Errorf("build cache: %w", err)
		}
		c.slots[pick.path] = pick
	}
	pick.inUse = true
	c.mu.Unlock()
	if pick.owner != owner {
		if err := chownAll(pick.path, owner); err != nil {
			c.release(pick)
			return nil, fmt.Errorf("build cache: give it to the environment's user: %w", err)
		}
		pick.owner = owner
	}
	return &Lease{c: c, s: pick}, nil
}

// Release gives the slot back once the environment ended: its size is
// measured, and the caches are evicted down to their bound.
func (l *Lease) Release() {
	l.once.Do(func() {
		l.s.bytes = size(l.s.path)
		l.c.release(l.s)
	})
}

func (c *Cache) release(s *slot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.inUse = false
	s.lastUsed = c.opt.Now()
	now := s.lastUsed
	_ = os.Chtimes(s.path, now, now)
	c.evict()
}

// evict removes slots no environment holds, least recently used first,
// while the slots hold more than MaxBytes. c.mu is held.
func (c *Cache) evict() {
	var total int64
	var free []*slot
	for _, s := range c.slots {
		total += s.bytes
		if !s.inUse {
			free = append(free, s)
		}
	}
	sort.Slice(free, func(i, j int) bool { return free[i].lastUsed.Before(free[j].lastUsed) })
	for _, s := range free {
		if total <= c.opt.MaxBytes {
			return
		}
		if err := os.RemoveAll(s.path); err != nil {
			c.opt.Log.Warn("build cache not removed", "folder", s.path, "err", err)
			continue
		}
		delete(c.slots, s.path)
		total -= s.bytes
		c.opt.Log.Info("build cache evicted", "folder", s.path, "bytes", s.bytes, "lastUsed", s.lastUsed)
	}
}

// Bytes is what the slots held when last measured.
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, s := range c.slots {
		n += s.bytes
	}
	return n
}

// size is what the files under dir take on disk (their blocks), folders
// and links included, so a cache of many small files counts for what it
// takes.
func size(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += diskBytes(info)
		}
		return nil
	})
	return n
}

// chownAll hands dir and everything in it to o, never following a link.
func chownAll(dir string, o Owner) error {
	if o.UID < 0 {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, o.UID, o.GID)
	})
}
