//go:build linux

package confine

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// ProcAttr starts the command in its own process group and, in a box, as
// the box's user (no supplementary groups) and inside its cgroup from its
// first instruction (clone3 CLONE_INTO_CGROUP). The returned function
// releases what procAttr opened, once the command started (or did not).
func (b *Box) ProcAttr(cmd *exec.Cmd, intoCgroup bool) (func(), error) {
	attr := &syscall.SysProcAttr{Setpgid: true}
	done := func() {}
	if b.User != nil {
		attr.Credential = &syscall.Credential{Uid: uint32(b.User.UID), Gid: uint32(b.User.UID), Groups: []uint32{}}
	}
	if intoCgroup && b.Cgroup != "" {
		fd, err := unix.Open(b.Cgroup, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return done, err
		}
		attr.UseCgroupFD, attr.CgroupFD = true, fd
		done = func() { unix.Close(fd) }
	}
	cmd.SysProcAttr = attr
	return done, nil
}

// JoinCgroup moves a started process into the box's cgroup, for kernels
// whose clone3 cannot start it there; what it forked before stays out.
func (b *Box) JoinCgroup(pid int) error {
	return os.WriteFile(filepath.Join(b.Cgroup, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// EndAll kills whatever of the environment is left: its cgroup, then every
// process of its user; without either, its process group (a process that
// left it lives on: the agent warned at start).
func (b *Box) EndAll(cmd *exec.Cmd) error {
	KillGroup(cmd, true)
	var errs []error
	if b.Cgroup != "" {
		if err := killCgroup(b.Cgroup); err != nil {
			errs = append(errs, fmt.Errorf("cgroup.kill: %w", err))
		}
	}
	if b.User != nil {
		if _, err := killUser(b.User.UID); err != nil {
			errs = append(errs, err)
		}
	}
	b.ended.Store(len(errs) == 0 && b.Cgroup != "" && b.User != nil)
	return errors.Join(errs...)
}

// ReclaimBoxes ends what an earlier run left of the environments whose
// folders are under envs/: each folder's owner, when an id of the range, is
// an environment's user, every process of whom is killed; a cgroup of that
// folder's name under the agent's is killed and removed.
func (n *Node) ReclaimBoxes(roots map[string]bool) int {
	killed := 0
	for r := range roots {
		if n.Cgroups != "" {
			dir := filepath.Join(n.Cgroups, "envlease-"+filepath.Base(r))
			if _, err := os.Stat(dir); err == nil {
				_ = killCgroup(dir)
				_ = removeCgroup(dir)
			}
		}
		if n.Users == nil {
			continue
		}
		st, err := os.Lstat(r)
		if err != nil {
			continue
		}
		if uid := FileOwner(st); uid >= int(n.Users.r.First) && uid <= int(n.Users.r.Last) {
			// Only while no agent lends the id: the earlier run's lock went
			// with it, and another agent may have taken the id since.
			n.Users.WhileFree(uint32(uid), func() {
				k, _ := killUser(uid)
				killed += k
			})
		}
	}
	return killed
}
