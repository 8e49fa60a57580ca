//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// canConfine says whether environments can be given users of their own:
// that takes root (setuid, chown).
func canConfine() bool { return os.Geteuid() == 0 }

func ownedBy(st fs.FileInfo, uid int) bool {
	s, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(s.Uid) == uid
}

func fileOwner(st fs.FileInfo) int {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(s.Uid)
	}
	return -1
}

// uidLockPath is one file, shared by every agent on the node, in which an
// agent holds a lock on byte <uid> while an environment of its runs as uid.
// The locks are open file description locks: they are per open of the file
// (so two agents in one process exclude each other too) and go with the
// agent, however it ends.
func uidLockPath() string {
	if st, err := os.Stat("/run"); err == nil && st.IsDir() {
		return "/run/envlease/uids.lock"
	}
	return filepath.Join(os.TempDir(), "envlease-uids.lock")
}

// uidPool lends user ids of a range to environments: one that no other
// agent on the node holds and no process runs as.
type uidPool struct {
	r    UIDRange
	lock *os.File

	mu   sync.Mutex
	next uint64 // offset into r of the next id to try
	held map[uint32]bool
}

func newUIDPool(r UIDRange) (*uidPool, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	path := uidLockPath()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("uid locks: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("uid locks: %w", err)
	}
	// Another user's file there could hold locks to keep ids from us, or
	// be swapped under us.
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || !ownedBy(st, os.Geteuid()) || st.Mode().Perm()&0o022 != 0 {
		f.Close()
		return nil, fmt.Errorf("uid locks: %s must be a regular file of the agent's user that others cannot write", path)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	// A random start spreads agents (and restarts) over the range, so an id
	// comes back to a new environment as late as it can: what an environment
	// leaves outside its folder (in /tmp, say) stays its user's.
	return &uidPool{r: r, lock: f, next: binary.LittleEndian.Uint64(b[:]) % r.size(), held: map[uint32]bool{}}, nil
}

func (p *uidPool) take() (*envUser, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tries := min(p.r.size(), 4096)
	for i := uint64(0); i < tries; i++ {
		uid := p.r.First + uint32(p.next)
		p.next = (p.next + 1) % p.r.size()
		if p.held[uid] {
			continue
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(uid), Len: 1}
		if err := unix.FcntlFlock(p.lock.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
				continue
			}
			return nil, fmt.Errorf("lock user id %d: %w", uid, err)
		}
		if userProcesses(int(uid)) > 0 {
			p.unlock(uid)
			continue
		}
		p.held[uid] = true
		var once sync.Once
		return &envUser{uid: int(uid), release: func() {
			once.Do(func() {
				p.mu.Lock()
				defer p.mu.Unlock()
				delete(p.held, uid)
				p.unlock(uid)
			})
		}}, nil
	}
	return nil, fmt.Errorf("no free user id in %s: the %d tried are in use (by environments of this node's agents, or by processes)", p.r, tries)
}

// whileFree runs fn holding uid's lock, if no one holds it.
func (p *uidPool) whileFree(uid uint32, fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[uid] {
		return
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(uid), Len: 1}
	if unix.FcntlFlock(p.lock.Fd(), unix.F_OFD_SETLK, &lk) != nil {
		return
	}
	defer p.unlock(uid)
	fn()
}

func (p *uidPool) unlock(uid uint32) {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: int64(uid), Len: 1}
	_ = unix.FcntlFlock(p.lock.Fd(), unix.F_OFD_SETLK, &lk)
}

// procStatus is what the agent reads of /proc/<pid>/status.
type procStatus struct {
	uids    [4]int // real, effective, saved, filesystem
	zombie  bool
	threads int
}

func readStatus(pid int) (procStatus, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procStatus{}, false
	}
	s := procStatus{uids: [4]int{-1, -1, -1, -1}, threads: 1}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		f := strings.Fields(v)
		switch k {
		case "State":
			s.zombie = len(f) > 0 && (f[0] == "Z" || f[0] == "X")
		case "Threads":
			if len(f) > 0 {
				s.threads, _ = strconv.Atoi(f[0])
			}
		case "Uid":
			for i := 0; i < 4 && i < len(f); i++ {
				s.uids[i], _ = strconv.Atoi(f[i])
			}
		}
	}
	return s, true
}

// runsAs says whether a process is alive (a zombie whose threads are all
// gone is not) and has uid as any of its user ids, so a setuid program an
// environment started counts as the environment's.
func (s procStatus) runsAs(uid int) bool {
	if s.zombie && s.threads <= 1 {
		return false
	}
	for _, u := range s.uids {
		if u == uid {
			return true
		}
	}
	return false
}

func pids() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]int, 0, len(entries))
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// userProcesses counts the live processes of uid.
func userProcesses(uid int) int {
	n := 0
	for _, pid := range pids() {
		if s, ok := readStatus(pid); ok && s.runsAs(uid) {
			n++
		}
	}
	return n
}

// killUser sends SIGKILL to every process of uid, again and again until a
// pass finds none (one may fork while a pass runs), and says how many it
// signalled. Each is signalled through a pidfd opened before its status is
// read, so a pid that is reused meanwhile is never signalled.
func killUser(uid int) (int, error) {
	if uid <= 0 || uid == os.Geteuid() {
		return 0, fmt.Errorf("refusing to kill every process of uid %d", uid)
	}
	killed := 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		found := 0
		for _, pid := range pids() {
			fd, err := unix.PidfdOpen(pid, 0)
			if err != nil && !errors.Is(err, unix.ENOSYS) {
				continue // gone
			}
			if s, ok := readStatus(pid); ok && s.runsAs(uid) {
				found++
				if fd >= 0 && err == nil {
					err = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
				} else {
					// Before Linux 5.3: no pidfds, the reuse race stays.
					err = unix.Kill(pid, unix.SIGKILL)
				}
				if err == nil {
					killed++
				}
			}
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		if found == 0 {
			return killed, nil
		}
		if time.Now().After(deadline) {
			return killed, fmt.Errorf("%d process(es) of uid %d still run after SIGKILL", found, uid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ownCgroup finds the agent's own cgroup v2 folder: the cgroup2 mount (from
// /proc/self/mountinfo; /sys/fs/cgroup on most nodes, .../unified on hybrid
// ones) plus the agent's path in it (/proc/self/cgroup, line "0::").
func ownCgroup() (string, error) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	own := ""
	for _, line := range strings.Split(string(cg), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	if own == "" {
		return "", errors.New("the agent is in no cgroup v2")
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 || g[0] != "cgroup2" {
			continue
		}
		mroot, mpoint := f[3], f[4]
		rel, ok := strings.CutPrefix(own, mroot)
		if !ok {
			continue
		}
		return filepath.Join(mpoint, rel), nil
	}
	return "", errors.New("no cgroup2 file system is mounted")
}

// cgroupParent is where environments' cgroups go, the agent's own cgroup,
// once a probe shows the agent may create one there with cgroup.kill.
func cgroupParent() (string, error) {
	dir, err := ownCgroup()
	if err != nil {
		return "", fmt.Errorf("%w: %v", errNoCgroup, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	probe := filepath.Join(dir, fmt.Sprintf("envlease-probe-%x", b))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return "", fmt.Errorf("%w: %v", errNoCgroup, err)
	}
	defer os.Remove(probe)
	if _, err := os.Stat(filepath.Join(probe, "cgroup.kill")); err != nil {
		return "", fmt.Errorf("%w: no cgroup.kill (Linux 5.14 or later has it)", errNoCgroup)
	}
	return dir, nil
}

// killCgroup kills every process of a cgroup (cgroup.kill) and waits until
// it is empty.
func killCgroup(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return err
		}
		if bytes.Contains(ev, []byte("populated 0")) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the cgroup still has processes after cgroup.kill")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func removeCgroup(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procAttr starts the command in its own process group and, in a box, as
// the box's user (no supplementary groups) and inside its cgroup from its
// first instruction (clone3 CLONE_INTO_CGROUP). The returned function
// releases what procAttr opened, once the command started (or did not).
func (b *box) procAttr(cmd *exec.Cmd, intoCgroup bool) (func(), error) {
	attr := &syscall.SysProcAttr{Setpgid: true}
	done := func() {}
	if b.user != nil {
		attr.Credential = &syscall.Credential{Uid: uint32(b.user.uid), Gid: uint32(b.user.uid), Groups: []uint32{}}
	}
	if intoCgroup && b.cgroup != "" {
		fd, err := unix.Open(b.cgroup, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return done, err
		}
		attr.UseCgroupFD, attr.CgroupFD = true, fd
		done = func() { unix.Close(fd) }
	}
	cmd.SysProcAttr = attr
	return done, nil
}

// joinCgroup moves a started process into the box's cgroup, for kernels
// whose clone3 cannot start it there; what it forked before stays out.
func (b *box) joinCgroup(pid int) error {
	return os.WriteFile(filepath.Join(b.cgroup, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// endAll kills whatever of the environment is left: its cgroup, then every
// process of its user; without either, its process group (a process that
// left it lives on: the agent warned at start).
func (b *box) endAll(cmd *exec.Cmd) error {
	killGroup(cmd, true)
	var errs []error
	if b.cgroup != "" {
		if err := killCgroup(b.cgroup); err != nil {
			errs = append(errs, fmt.Errorf("cgroup.kill: %w", err))
		}
	}
	if b.user != nil {
		if _, err := killUser(b.user.uid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unprivilegedPortStart is the lowest port a process without privileges may
// bind (net.ipv4.ip_unprivileged_port_start).
func unprivilegedPortStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		return 1024
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 1024
	}
	return n
}

// reclaimBoxes ends what an earlier run left of the environments whose
// folders are under envs/: each folder's owner, when an id of the range, is
// an environment's user, every process of whom is killed; a cgroup of that
// folder's name under the agent's is killed and removed.
func (a *Agent) reclaimBoxes(roots map[string]bool) int {
	n := 0
	for r := range roots {
		if a.cgroups != "" {
			dir := filepath.Join(a.cgroups, "envlease-"+filepath.Base(r))
			if _, err := os.Stat(dir); err == nil {
				_ = killCgroup(dir)
				_ = removeCgroup(dir)
			}
		}
		if a.users == nil {
			continue
		}
		st, err := os.Lstat(r)
		if err != nil {
			continue
		}
		if uid := fileOwner(st); uid >= int(a.users.r.First) && uid <= int(a.users.r.Last) {
			// Only while no agent lends the id: the earlier run's lock went
			// with it, and another agent may have taken the id since.
			a.users.whileFree(uint32(uid), func() {
				k, _ := killUser(uid)
				n += k
			})
		}
	}
	return n
}
