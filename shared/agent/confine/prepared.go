package confine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
)

// PreparedBoxes keeps a few boxes made ahead of any claim, so that a cold
// start takes one instead of making it: what a box holds does not depend on
// the template (a user id taken and checked against the node's processes,
// what an earlier holder of the id left removed, a folder, a disk of the
// node's default size made, attached and mounted there, its /tmp). A start
// moves it to its own folder (a rename, or a bind mount of the disk and the
// first mount removed) and makes its cgroup.
// Making one is most of a cold start's preparation on a node that bounds
// disks (mkfs.ext4 and the mount) and scans /proc for a free id; taking one
// is a rename or a bind mount. The pool holds at most Max, made one after
// another in the background when Fill is called (after the agent cleared
// what an earlier run left, and whenever an environment is ready or
// over), so its work does not compete with the start that took one. A box
// of a template whose disk is not the default size is made as before.
// docs/nodes.md, "Boxes made ahead".
type PreparedBoxes struct {
	n    *Node
	dir  string
	size DiskSize
	max  int

	mu      sync.Mutex
	ready   []*Box
	filling bool
	closed  bool
	// filled is done when no fill runs (Close waits for it).
	filled sync.WaitGroup
	// cleared: what an earlier run left in dir was removed; failing: the
	// last box failed to be made (said once, until one is made again).
	cleared, failing bool
}

// clearLeft removes what an earlier run of the agent left in the pool's
// folder: boxes made ahead, their disks mounted (the images went with the
// agent's start, Disks.RemoveLeftDisks), their user ids no longer held.
// Nothing ever ran in them.
func (p *PreparedBoxes) clearLeft() {
	_ = os.MkdirAll(p.dir, 0o700)
	des, err := os.ReadDir(p.dir)
	if err != nil {
		return
	}
	for _, de := range des {
		r := filepath.Join(p.dir, de.Name())
		if err := RemoveDisk(r, ""); err != nil {
			p.n.Log.Warn("a box an earlier run made ahead is not removed", "root", r, "err", err)
			continue
		}
		_ = os.RemoveAll(r)
	}
}

// DefaultPreparedBoxes is how many boxes a node keeps made ahead: a few
// cold starts at once take one each; a crowd takes them and then makes
// the rest as before.
const DefaultPreparedBoxes = 4

// Prepare gives the node a pool of up to max boxes made ahead in dir (a
// folder of the agent's own, on the file system of the environments'
// folders, which a box is moved to), each with a disk of size, the node's
// default (the zero size without Disks). It makes nothing until Fill,
// whose first round removes what an earlier run of the agent left in dir.
func (n *Node) Prepare(dir string, size DiskSize, max int) *PreparedBoxes {
	p := &PreparedBoxes{n: n, dir: dir, size: size, max: max}
	n.Prepared = p
	return p
}

// Fill makes boxes in the background until the pool holds its Max, unless
// it is filling already. A box that cannot be made ends the round (logged);
// the next Fill tries again.
func (p *PreparedBoxes) Fill() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.filling || p.closed || len(p.ready) >= p.max {
		return
	}
	p.filling = true
	first := !p.cleared
	p.cleared = true
	p.filled.Add(1)
	go func() {
		defer p.filled.Done()
		if first {
			p.clearLeft()
		}
		p.fill()
	}()
}

func (p *PreparedBoxes) fill() {
	for {
		p.mu.Lock()
		if p.closed || len(p.ready) >= p.max {
			p.filling = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		var name [6]byte
		_, _ = rand.Read(name[:])
		// Its cgroup is made when it is taken, named for its folder then.
		b, err := p.n.makeBox(context.Background(), filepath.Join(p.dir, "prep-"+hex.EncodeToString(name[:])), p.size)
		p.mu.Lock()
		if err != nil {
			said := p.failing
			p.filling, p.failing = false, true
			p.mu.Unlock()
			if !said {
				p.n.Log.Warn("a box made ahead failed; cold starts make their own until one is made", "err", err)
			}
			return
		}
		if p.closed {
			p.mu.Unlock()
			b.ended.Store(true) // nothing ever ran in it
			p.n.Cleanup(b)
			return
		}
		p.ready = append(p.ready, b)
		p.failing = false
		p.mu.Unlock()
	}
}

// take hands out a box made ahead with a disk of size, nil when none is.
func (p *PreparedBoxes) take(size DiskSize) *Box {
	if p == nil || size != p.size {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 {
		return nil
	}
	b := p.ready[0]
	p.ready = p.ready[1:]
	return b
}

// Ready is how many boxes the pool holds now.
func (p *PreparedBoxes) Ready() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// Filling says whether boxes are being made now.
func (p *PreparedBoxes) Filling() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.filling
}

// Close removes the boxes the pool holds (their disks, folders and
// cgroups; their user ids given back) and makes no more; one being made
// is removed once made, before Close returns.
func (p *PreparedBoxes) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, b := range ready {
		// Nothing ever ran in it: its user id is clean.
		b.ended.Store(true)
		p.n.Cleanup(b)
	}
	p.filled.Wait()
}

// TakeBox is the box of environment id, dir/id: one made ahead (Prepared)
// when the pool holds one with a disk of size, moved there, else a new one.
// Either way its cgroup is made now, named for its folder.
func (n *Node) TakeBox(ctx context.Context, dir, id string, size DiskSize) (*Box, error) {
	root := filepath.Join(dir, id)
	if b := n.Prepared.take(size); b != nil {
		err := n.moveBox(b, root)
		if err == nil {
			n.addCgroup(b)
			return b, nil
		}
		n.Log.Warn("a box made ahead could not be moved to the environment's folder; making one", "root", root, "err", err)
		n.Cleanup(b)
	}
	return n.NewBox(ctx, root, size)
}

// moveBox moves a box made ahead to its environment's folder, root: the
// folder renamed, or with a disk, its mount moved to a new folder
// (Disk.moveTo) and the old one removed.
func (n *Node) moveBox(b *Box, root string) error {
	if b.Disk == nil {
		if err := os.Rename(b.Root, root); err != nil {
			return err
		}
		b.Root = root
		return nil
	}
	if err := os.Mkdir(root, 0o700); err != nil {
		return err
	}
	if err := b.Disk.moveTo(root, filepath.Join(filepath.Dir(b.Disk.Image), filepath.Base(root)+".img")); err != nil {
		_ = os.Remove(root)
		return err
	}
	old := b.Root
	b.Root = root
	_ = os.Remove(old)
	return nil
}
