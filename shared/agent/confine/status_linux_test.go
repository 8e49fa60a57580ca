//go:build linux

package confine

import (
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The status parser picks state, threads and the four user ids, as the
// kernel writes them (tabs between fields).
func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     procStatus
	}{
		{"running", "Name:\tsleep\nState:\tS (sleeping)\nUid:\t1000\t1001\t1002\t1003\nGid:\t0\t0\t0\t0\nThreads:\t3\n",
			procStatus{uids: [4]int{1000, 1001, 1002, 1003}, threads: 3}},
		{"zombie", "State:\tZ (zombie)\nUid:\t5\t5\t5\t5\nThreads:\t1\n", procStatus{uids: [4]int{5, 5, 5, 5}, zombie: true, threads: 1}},
		{"no uid line", "Name:\tx\nState:\tR (running)\n", procStatus{uids: [4]int{-1, -1, -1, -1}, threads: 1}},
		{"no final newline", "Uid:\t7\t7\t7\t7", procStatus{uids: [4]int{7, 7, 7, 7}, threads: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseStatus([]byte(tc.in)); got != tc.want {
				t.Fatalf("parseStatus = %+v, want %+v", got, tc.want)
			}
		})
	}
	// This process, read from /proc, runs as the test's user.
	s, ok := readStatus(os.Getpid())
	if !ok || s.uids[0] != os.Getuid() || s.uids[1] != os.Geteuid() || s.zombie || s.threads < 1 {
		t.Fatalf("own status: %+v %v", s, ok)
	}
}

// Ids taken at once, sharing scans of /proc, are all distinct.
func TestTakeAtOnce(t *testing.T) {
	if !CanConfine() {
		t.Skip("lending user ids needs root")
	}
	p, err := NewUIDPool(UIDRange{First: 3_900_000, Last: 3_900_063})
	if err != nil {
		t.Fatal(err)
	}
	const n = 32
	got := make(chan *User, n)
	for range n {
		go func() {
			u, err := p.Take()
			if err != nil {
				t.Error(err)
			}
			got <- u
		}()
	}
	seen := map[int]bool{}
	for range n {
		u := <-got
		if u == nil {
			continue
		}
		if seen[u.UID] {
			t.Fatalf("uid %d lent twice", u.UID)
		}
		seen[u.UID] = true
		defer u.release()
	}
}

// Ids given back after a clean end stay locked and come back, oldest first,
// only after cleanReuseAfter others; one given back otherwise is unlocked
// and not kept. A clean one is lent without a scan, and never twice.
func TestCleanIDsComeBackLate(t *testing.T) {
	if !CanConfine() {
		t.Skip("lending user ids needs root")
	}
	p, err := NewUIDPool(UIDRange{First: 3_900_100, Last: 3_900_399})
	if err != nil {
		t.Fatal(err)
	}
	var first int
	for i := range cleanReuseAfter + 1 {
		u, err := p.Take()
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = u.UID
		}
		u.ended.Store(true)
		u.release()
	}
	dirty, err := p.Take()
	if err != nil {
		t.Fatal(err)
	}
	if dirty.UID != first {
		t.Fatalf("after %d clean ends, lent %d, want the oldest clean, %d", cleanReuseAfter+1, dirty.UID, first)
	}
	dirty.release() // not ended: unlocked, not kept
	p.mu.Lock()
	kept, held := len(p.clean), p.held[uint32(first)]
	p.mu.Unlock()
	if kept != cleanReuseAfter || held {
		t.Fatalf("%d kept clean (want %d), the dirty id still held: %v", kept, cleanReuseAfter, held)
	}
	seen := map[int]bool{}
	for range 2 * cleanReuseAfter {
		u, err := p.Take()
		if err != nil {
			t.Fatal(err)
		}
		if seen[u.UID] {
			t.Fatalf("uid %d lent twice", u.UID)
		}
		seen[u.UID] = true
		defer u.release()
	}
}

// Users ended at once share their passes over /proc, and each call returns
// once none of its user's processes is left (a child forked meanwhile
// included), with how many it signalled.
func TestKillUsersAtOnce(t *testing.T) {
	if !CanConfine() {
		t.Skip("running processes as other users needs root")
	}
	const first, users, each = 3_900_500, 6, 3
	var cmds []*exec.Cmd
	for u := range users {
		for range each {
			// A shell that forks a sleeper of its own: two processes each.
			c := exec.Command("sh", "-c", "sleep 60 & wait")
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(first + u), Gid: uint32(first + u)}}
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			cmds = append(cmds, c)
		}
	}
	for _, c := range cmds {
		go func() { _ = c.Wait() }()
	}
	time.Sleep(100 * time.Millisecond) // the sleepers forked
	var wg sync.WaitGroup
	for u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := killUser(first + u)
			if err != nil || n < each {
				t.Errorf("uid %d: %d signalled, %v", first+u, n, err)
			}
		}()
	}
	wg.Wait()
	for _, pid := range Pids() {
		if s, ok := readStatus(pid); ok {
			for u := range users {
				if s.runsAs(first + u) {
					t.Fatalf("pid %d of uid %d left", pid, first+u)
				}
			}
		}
	}
}
