package confine

import (
	"fmt"

	"github.com/envlease/envlease/shared/bytesize"
)

// Disks gives each environment a filesystem of its own, of a bounded size
// and a bounded count of inodes: everything the environment can write (its
// folder or a container's overlay, its shares and snapshot, its output
// files) lands there, and past the bound a write fails with ENOSPC inside
// the environment instead of filling the node. It is an ext4 filesystem in
// a sparse image file over a loop device (docs/nodes.md, "Disk"): the
// node's disk holds only what the environment wrote, and the kernel counts
// both bytes and inodes. Nil Disks (the agent is not root) bound nothing.
type Disks struct {
	// Dir holds the image files.
	Dir string
	// Default is the size of an environment whose template names none,
	// Max the largest a template may ask for.
	Default, Max uint64
	// Mkfs is the mkfs.ext4 binary.
	Mkfs string
	// Lean says that Mkfs makes a filesystem with nothing reserved for
	// growing and no backup superblocks (e2fsprogs 1.43 or later; an
	// older one makes the disks as before).
	Lean bool
}

// Default bounds of an environment's disk: 10 GiB unless its template
// says, 100 GiB at most. The image is sparse, so a bound costs the node
// only what is written; the node's floors of free space (MinFreeDisk) stop
// claims before the sum of what is written fills it.
const (
	DefaultDisk    = 10 << 30
	DefaultMaxDisk = 100 << 30
)

// BytesPerInode is how many bytes of an environment's disk give it one
// inode: ext4's own default ratio, so a 1 GiB disk holds 65,536 files and
// folders, a 10 GiB one 655,360.
const BytesPerInode = 16 << 10

// minDisk is the smallest disk made: ext4's own metadata needs some room.
const minDisk = 16 << 20

// DiskSize is an environment's disk: its bytes and its inodes.
type DiskSize struct {
	Bytes, Inodes uint64
}

// Size is the disk of a template whose resources.disk is spec ("" for the
// node's default), or why the node cannot give it.
func (d *Disks) Size(spec string) (DiskSize, error) {
	n := d.Default
	if spec != "" {
		v, err := bytesize.Parse(spec)
		if err != nil {
			return DiskSize{}, fmt.Errorf("resources.disk %q: %v", spec, err)
		}
		n = v
	}
	if n > d.Max {
		return DiskSize{}, fmt.Errorf("resources.disk %s is beyond this node's maximum of %s", spec, bytesize.Format(d.Max))
	}
	if n < minDisk {
		n = minDisk
	}
	return DiskSize{Bytes: n, Inodes: n / BytesPerInode}, nil
}
