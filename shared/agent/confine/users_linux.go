//go:build linux

package confine

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// CanConfine says whether environments can be given users of their own:
// that takes root (setuid, chown).
func CanConfine() bool { return os.Geteuid() == 0 }

func OwnedBy(st fs.FileInfo, uid int) bool {
	s, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(s.Uid) == uid
}

func FileOwner(st fs.FileInfo) int {
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

// UIDPool lends user ids of a range to environments: one that no other
// agent on the node holds and no process runs as.
type UIDPool struct {
	r    UIDRange
	lock *os.File

	mu   sync.Mutex
	next uint64 // offset into r of the next id to try
	held map[uint32]bool
}

func NewUIDPool(r UIDRange) (*UIDPool, error) {
	if err := r.Check(); err != nil {
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
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || !OwnedBy(st, os.Geteuid()) || st.Mode().Perm()&0o022 != 0 {
		f.Close()
		return nil, fmt.Errorf("uid locks: %s must be a regular file of the agent's user that others cannot write", path)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	// A random start spreads agents (and restarts) over the range, so an id
	// comes back to a new environment as late as it can: what an environment
	// leaves outside its folder (in /tmp, say) stays its user's.
	return &UIDPool{r: r, lock: f, next: binary.LittleEndian.Uint64(b[:]) % r.size(), held: map[uint32]bool{}}, nil
}

func (p *UIDPool) Take() (*User, error) {
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
		return &User{UID: int(uid), release: func() {
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

// WhileFree runs fn holding uid's lock, if no one holds it.
func (p *UIDPool) WhileFree(uid uint32, fn func()) {
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

func (p *UIDPool) unlock(uid uint32) {
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

// RunsAs says whether process pid is alive and has uid as any of its user
// ids (real, effective, saved, filesystem).
func RunsAs(pid, uid int) bool {
	s, ok := readStatus(pid)
	return ok && s.runsAs(uid)
}

// Pids lists the node's processes, from /proc.
func Pids() []int {
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
	for _, pid := range Pids() {
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
		for _, pid := range Pids() {
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
