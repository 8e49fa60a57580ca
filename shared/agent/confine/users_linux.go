//go:build linux

package confine

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
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
	// clean are ids given back after a clean end (User.Ended), in the
	// order they came back, whose locks the pool kept: no one else could
	// run anything as them since, so they need no scan of the node's
	// processes to be lent again.
	clean []uint32

	scans procScans
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
	if len(p.clean) > cleanReuseAfter {
		uid := p.clean[0]
		p.clean = append(p.clean[:0], p.clean[1:]...)
		p.mu.Unlock()
		return p.lent(uid), nil
	}
	p.mu.Unlock()
	tries := min(p.r.size(), 4096)
	for i := uint64(0); i < tries; {
		uid, n, err := p.lockNext(tries - i)
		i += n
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		// Every process the id runs now was started before this scan
		// began, or by whoever held its lock, which this pool holds now.
		// So a scan that begins after the lock is taken says whether any
		// is left (an agent that crashed leaves its environments' processes
		// but not its locks): starts at the same time share one scan.
		if p.scans.usersAfterNow(p.r)[uid] {
			p.mu.Lock()
			delete(p.held, uid)
			p.unlock(uid)
			p.mu.Unlock()
			continue
		}
		return p.lent(uid), nil
	}
	return nil, fmt.Errorf("no free user id in %s: the %d tried are in use (by environments of this node's agents, or by processes)", p.r, tries)
}

// cleanReuseAfter is how many ids given back clean the pool keeps before it
// lends the oldest again: an id comes back to a new environment only after
// that many others have ended (what one leaves in the node's shared folders
// is removed at its end and again when the id is lent, RemoveLeftovers), and
// the pool holds at most cleanReuseAfter+1 locks of idle ids.
const cleanReuseAfter = 64

// lent is uid, locked and held, as a User: given back clean (the
// environment's processes all ended, User.Ended) it stays locked in clean,
// else it is unlocked.
func (p *UIDPool) lent(uid uint32) *User {
	u := &User{UID: int(uid)}
	var once sync.Once
	u.release = func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if u.ended.Load() {
				p.clean = append(p.clean, uid)
				return
			}
			delete(p.held, uid)
			p.unlock(uid)
		})
	}
	return u
}

// lockNext takes the lock of the next id no one holds, trying at most
// limit, and marks it held; n is how many it tried (0: none was free).
func (p *UIDPool) lockNext(limit uint64) (uid uint32, n uint64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n < limit {
		uid = p.r.First + uint32(p.next)
		p.next = (p.next + 1) % p.r.size()
		n++
		if p.held[uid] {
			continue
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(uid), Len: 1}
		if err := unix.FcntlFlock(p.lock.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
				continue
			}
			return 0, n, fmt.Errorf("lock user id %d: %w", uid, err)
		}
		p.held[uid] = true
		return uid, n, nil
	}
	return 0, 0, nil
}

// procScans shares scans of /proc among the ids taken at the same time: a
// caller gets the first scan that begins after it asked. Reading every
// process's status is what a start costs on a node with many processes,
// so a crowd of starts pays for a few scans rather than one each.
type procScans struct {
	mu        sync.Mutex
	cond      *sync.Cond
	running   bool
	started   uint64 // scans begun
	completed uint64 // the number of the last scan finished
	users     map[uint32]bool
}

// usersAfterNow returns the ids of r that live processes run as, from a
// scan that began after the call.
func (s *procScans) usersAfterNow(r UIDRange) map[uint32]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cond == nil {
		s.cond = sync.NewCond(&s.mu)
	}
	want := s.started + 1
	for s.completed < want {
		if s.running {
			s.cond.Wait()
			continue
		}
		s.running = true
		s.started++
		n := s.started
		s.mu.Unlock()
		users := scanUsers(r)
		s.mu.Lock()
		s.running, s.users, s.completed = false, users, n
		s.cond.Broadcast()
	}
	return s.users
}

// scanUsers reads every process's status once and returns the ids of r
// any live one runs as.
func scanUsers(r UIDRange) map[uint32]bool {
	out := map[uint32]bool{}
	var buf [4096]byte
	for _, pid := range Pids() {
		st, ok := readStatusInto(pid, buf[:])
		if !ok || st.zombie && st.threads <= 1 {
			continue
		}
		for _, u := range st.uids {
			if u >= int(r.First) && u <= int(r.Last) {
				out[uint32(u)] = true
			}
		}
	}
	return out
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
	var buf [4096]byte
	return readStatusInto(pid, buf[:])
}

// readStatusInto reads /proc/<pid>/status with one open, one read and one
// close into buf (the file is a page at most), and picks out its state,
// threads and user ids without allocating: the agent reads every
// process's on each scan.
func readStatusInto(pid int, buf []byte) (procStatus, bool) {
	var path [32]byte
	p := strconv.AppendInt(append(path[:0], "/proc/"...), int64(pid), 10)
	p = append(p, "/status"...)
	fd, err := unix.Open(string(p), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return procStatus{}, false
	}
	n, err := unix.Read(fd, buf)
	unix.Close(fd)
	if err != nil || n <= 0 {
		return procStatus{}, false
	}
	return parseStatus(buf[:n]), true
}

// parseStatus picks State, Threads and Uid out of a status file.
func parseStatus(b []byte) procStatus {
	s := procStatus{uids: [4]int{-1, -1, -1, -1}, threads: 1}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		switch string(k) {
		case "State":
			v = bytes.TrimLeft(v, " \t")
			s.zombie = len(v) > 0 && (v[0] == 'Z' || v[0] == 'X')
		case "Threads":
			if f, _ := nextField(v); f != nil {
				s.threads = atoi(f)
			}
		case "Uid":
			for i := 0; i < 4; i++ {
				var f []byte
				if f, v = nextField(v); f == nil {
					break
				}
				s.uids[i] = atoi(f)
			}
		}
	}
	return s
}

// nextField returns the first field of b separated by spaces or tabs, and
// what follows it.
func nextField(b []byte) (field, rest []byte) {
	b = bytes.TrimLeft(b, " \t")
	if len(b) == 0 {
		return nil, nil
	}
	i := bytes.IndexAny(b, " \t")
	if i < 0 {
		return b, nil
	}
	return b[:i], b[i:]
}

func atoi(b []byte) int {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
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
// read (again, after a first read found it uid's), so a pid that is reused
// meanwhile is never signalled. The passes over /proc are shared by every
// user ended at the same time (a crowd deleted at once would otherwise read
// every process's status once per environment): a call returns once a
// pass that began after it found no process of uid.
func killUser(uid int) (int, error) {
	if uid <= 0 || uid == os.Geteuid() {
		return 0, fmt.Errorf("refusing to kill every process of uid %d", uid)
	}
	return userKills.end(uid)
}

// userKills is the node's one runner of kill passes.
var userKills = &killPasses{waiting: map[int][]*killWaiter{}}

type killPasses struct {
	mu      sync.Mutex
	waiting map[int][]*killWaiter
	started uint64 // passes begun
	running bool
}

type killWaiter struct {
	from     uint64 // the first pass that counts for it
	deadline time.Time
	killed   int
	done     chan error
}

func (k *killPasses) end(uid int) (int, error) {
	w := &killWaiter{deadline: time.Now().Add(10 * time.Second), done: make(chan error, 1)}
	k.mu.Lock()
	w.from = k.started + 1
	k.waiting[uid] = append(k.waiting[uid], w)
	if !k.running {
		k.running = true
		go k.run()
	}
	k.mu.Unlock()
	err := <-w.done
	return w.killed, err
}

// run makes passes while anyone waits: each kills the processes of every
// uid waited for, and answers those whose uid it found none of.
func (k *killPasses) run() {
	for {
		k.mu.Lock()
		if len(k.waiting) == 0 {
			k.running = false
			k.mu.Unlock()
			return
		}
		k.started++
		pass := k.started
		uids := make(map[int]bool, len(k.waiting))
		for uid := range k.waiting {
			uids[uid] = true
		}
		k.mu.Unlock()

		found, killed := killPass(uids)

		k.mu.Lock()
		now := time.Now()
		for uid, ws := range k.waiting {
			if !uids[uid] {
				continue // came during the pass: the next one is its
			}
			keep := ws[:0]
			for _, w := range ws {
				if pass < w.from {
					keep = append(keep, w)
					continue
				}
				w.killed += killed[uid]
				switch {
				case found[uid] == 0:
					w.done <- nil
				case now.After(w.deadline):
					w.done <- fmt.Errorf("%d process(es) of uid %d still run after SIGKILL", found[uid], uid)
				default:
					keep = append(keep, w)
				}
			}
			if len(keep) == 0 {
				delete(k.waiting, uid)
			} else {
				k.waiting[uid] = keep
			}
		}
		again := len(found) > 0
		k.mu.Unlock()
		if again {
			time.Sleep(5 * time.Millisecond) // what was killed is going
		}
	}
}

// killPass reads every process's status once and signals each of the uids
// with SIGKILL through a pidfd; it says how many of each it found and how
// many it signalled.
func killPass(uids map[int]bool) (found, killed map[int]int) {
	found, killed = map[int]int{}, map[int]int{}
	var buf [4096]byte
	which := func(s procStatus) int {
		if s.zombie && s.threads <= 1 {
			return -1 // gone (runsAs)
		}
		for _, u := range s.uids {
			if uids[u] {
				return u
			}
		}
		return -1
	}
	self := os.Getpid()
	for _, pid := range Pids() {
		// Never the agent itself: a thread of its may act on an
		// environment's files with a lent uid as its file-system user
		// (docs/files.md).
		if pid == self {
			continue
		}
		// Most processes are not those users': read first, and open a
		// pidfd only for those that are, then read again through it, so
		// the process signalled is the one read.
		if s, ok := readStatusInto(pid, buf[:]); !ok || which(s) < 0 {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil && !errors.Is(err, unix.ENOSYS) {
			continue // gone
		}
		if s, ok := readStatusInto(pid, buf[:]); ok {
			if uid := which(s); uid >= 0 {
				found[uid]++
				if fd >= 0 && err == nil {
					err = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
				} else {
					// Before Linux 5.3: no pidfds, the reuse race stays.
					err = unix.Kill(pid, unix.SIGKILL)
				}
				if err == nil {
					killed[uid]++
				}
			}
		}
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	return found, killed
}
