package agent_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/archive/archivetest"
	"github.com/envlease/envlease/shared/domain"
)

// fakeDisk is a work dir's filesystem whose free space the test sets.
type fakeDisk struct {
	mu    sync.Mutex
	space agent.DiskSpace
	calls atomic.Int64
}

var (
	roomy        = agent.DiskSpace{FreeBytes: 80 << 30, TotalBytes: 100 << 30, FreeInodes: 5_000_000, TotalInodes: 6_000_000}
	fewBytes     = agent.DiskSpace{FreeBytes: 512 << 20, TotalBytes: 100 << 30, FreeInodes: 5_000_000, TotalInodes: 6_000_000}
	fewInodes    = agent.DiskSpace{FreeBytes: 80 << 30, TotalBytes: 100 << 30, FreeInodes: 1000, TotalInodes: 6_000_000}
	inodesUntold = agent.DiskSpace{FreeBytes: 80 << 30, TotalBytes: 100 << 30}
)

func newFakeDisk(d agent.DiskSpace) *fakeDisk { return &fakeDisk{space: d} }

func (f *fakeDisk) set(d agent.DiskSpace) {
	f.mu.Lock()
	f.space = d
	f.mu.Unlock()
}

func (f *fakeDisk) statfs(string) (agent.DiskSpace, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.space, nil
}

// waitCalls waits until the agent has read the filesystem n more times.
func (f *fakeDisk) waitCalls(t *testing.T, n int64) {
	t.Helper()
	want := f.calls.Load() + n
	waitFor(t, "the agent to look at its disk", func() bool { return f.calls.Load() >= want })
}

// Over HTTP, a node short of disk claims nothing: the lease waits, pending,
// for a node with room (here: the same one once it has room again), and the
// environment already running is untouched.
func TestShortOfDiskClaimsNothing(t *testing.T) {
	s := newStack(t, sleeper)
	disk := newFakeDisk(roomy)
	logs := &lockedBuffer{}
	s.runAgentWith(t, t.TempDir(), 300*time.Millisecond, func(c *agent.Config) {
		c.Statfs = disk.statfs
		c.Log = slog.New(slog.NewJSONHandler(logs, nil))
	})
	running := s.lease(t, "sleeper")
	s.wait(t, running, domain.StateReady)

	disk.set(fewBytes)
	// After two looks at the short disk the claim loop is waiting for room,
	// not in a claim (a claim in flight would be taken and refused instead).
	disk.waitCalls(t, 2)
	waiting := s.lease(t, "sleeper")
	disk.waitCalls(t, 2)
	if e := s.get(t, waiting); e.State != domain.StatePending {
		t.Fatalf("leased while the node is short of disk: %s (%q), want pending", e.State, e.Error)
	}
	if e := s.get(t, running); e.State != domain.StateReady {
		t.Fatalf("the running environment is %s (%q)", e.State, e.Error)
	}
	warned := logs.records("WARN", "claiming no environments")
	if len(warned) != 1 || !strings.Contains(warned[0]["err"].(string), "512.0 MiB free of 100.0 GiB in the agent's work dir, below 1.0 GiB (agent limit -min-free-disk)") {
		t.Fatalf("the log says %v, want one warning naming the floor", warned)
	}
	disk.set(roomy)
	s.wait(t, waiting, domain.StateReady)
	if n := len(logs.records("INFO", "claiming again")); n != 1 {
		t.Fatalf("%d records say the node claims again, want 1", n)
	}
}

// A download that would take the disk below its floor is not started: the
// environment fails saying so, and nothing of it is left.
func TestDownloadPastTheFloorIsNotStarted(t *testing.T) {
	snaps := newSnapshots(t)
	s := newStackLinks(t, snaps, domain.Template{Name: "restore", Command: []string{"sleep", "3600"}})
	snaps.store = s.Store
	// 16 KiB above the 1 GiB floor: room to claim, not for the archive.
	disk := newFakeDisk(agent.DiskSpace{FreeBytes: 1<<30 + 16<<10, TotalBytes: 100 << 30, FreeInodes: 5_000_000, TotalInodes: 6_000_000})
	dir := s.runAgentWith(t, t.TempDir(), 300*time.Millisecond, func(c *agent.Config) { c.Statfs = disk.statfs })
	snaps.add(t, "art_zeros", auditArchive(t, archivetest.GiBOfZeros))
	id := s.leaseSnapshot(t, "restore", "art_zeros")
	e := s.wait(t, id, domain.StateFailed)
	for _, want := range []string{"download snapshot art_zeros", "the node's disk is nearly full", "agent limit -min-free-disk"} {
		if !strings.Contains(e.Error, want) {
			t.Fatalf("the error lacks %q: %q", want, e.Error)
		}
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "envs")); len(left) != 0 {
		t.Fatalf("the work dir holds %v", left)
	}
}

// Over the node protocol, a node short of inodes says it is short (and
// full, for an older service), so offers go to nodes that are not, and claims nothing it is offered once; offered the
// same environment again (no other node took it), it claims it and fails
// it with why, before making anything of it on disk. A filesystem that does
// not count inodes is not judged by them.
func TestShortOfDiskRefusesAnEnvironmentOfferedTwice(t *testing.T) {
	s := newSocketStack(t, sleeper)
	disk := newFakeDisk(fewInodes)
	dir := t.TempDir()
	a := s.runAgentReturning(t, dir, 300*time.Millisecond, func(c *agent.Config) { c.Statfs = disk.statfs })
	waitFor(t, "the node protocol connection", func() bool { return a.Transport() == agent.TransportWebSocket })
	waitFor(t, "the node to say it is short and full", func() bool {
		conns, err := s.Store.PoolConnections(context.Background(), "acme", "local", "", 10, s.Clock.Now())
		return err == nil && len(conns) == 1 && conns[0].Full && conns[0].Short
	})
	id := s.lease(t, "sleeper")
	disk.waitCalls(t, 2)
	if e := s.get(t, id); e.State != domain.StatePending {
		t.Fatalf("offered once to a node short of inodes: %s (%q), want pending", e.State, e.Error)
	}
	s.Clock.Advance(time.Second)
	if res, err := s.offerer.Reoffer(context.Background()); err != nil || res.Reoffered != 1 {
		t.Fatalf("re-offer: %+v %v", res, err)
	}
	e := s.wait(t, id, domain.StateFailed)
	for _, want := range []string{"the node refused the environment", "1000 free inodes of 6000000", "below 5%", "agent limit -min-free-inodes"} {
		if !strings.Contains(e.Error, want) {
			t.Fatalf("the error lacks %q: %q", want, e.Error)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "envs", id)); !os.IsNotExist(err) {
		t.Fatalf("a folder was made for the refused environment: %v", err)
	}

	disk.set(inodesUntold)
	waitFor(t, "the node to say it has room", func() bool {
		conns, err := s.Store.PoolConnections(context.Background(), "acme", "local", "", 10, s.Clock.Now())
		return err == nil && len(conns) == 1 && !conns[0].Full && !conns[0].Short
	})
	s.wait(t, s.lease(t, "sleeper"), domain.StateReady)
}
