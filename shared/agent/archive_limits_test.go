package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/archive/archivetest"
	"github.com/envlease/envlease/shared/domain"
)

func auditArchive(t *testing.T, gen func() ([]byte, error)) []byte {
	t.Helper()
	b, err := gen()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Through the agent: the audit's archives fail their environments, naming
// the share or snapshot and the limit, and nothing of the environment is
// left on the node: the 100,000 files past a configured entries limit, the
// 1 GiB of zeros past the default ratio.
func TestAuditArchivesFailTheirEnvironments(t *testing.T) {
	snaps := newSnapshots(t)
	s := newStackLinks(t, snaps, sharer, domain.Template{Name: "restore", Command: []string{"sleep", "3600"}})
	snaps.store = s.Store
	work := s.runAgentWith(t, t.TempDir(), 300*time.Millisecond, func(c *agent.Config) {
		c.Archives.MaxEntries = 1000
		c.NoWarm = true
	})
	snaps.add(t, "art_many", auditArchive(t, archivetest.ManyFiles))
	snaps.add(t, "art_zeros", auditArchive(t, archivetest.GiBOfZeros))
	for _, c := range []struct {
		lease func() string
		want  []string
	}{
		{func() string { return s.leaseShare(t, "art_many") },
			[]string{`share "src"`, "exceeds 1000 entries (agent limit -archive-max-entries)"}},
		{func() string { return s.leaseSnapshot(t, "restore", "art_zeros") },
			[]string{"snapshot art_zeros", "would unpack to 1.0 GiB", "(agent limit -archive-max-ratio)"}},
	} {
		id := c.lease()
		e := s.wait(t, id, domain.StateFailed)
		for _, w := range c.want {
			if !strings.Contains(e.Error, w) {
				t.Fatalf("the error lacks %q: %q", w, e.Error)
			}
		}
		if _, err := os.Stat(filepath.Join(work, "envs", id)); !os.IsNotExist(err) {
			t.Fatalf("the failed environment's folder is left: %v", err)
		}
	}
	if left, _ := os.ReadDir(filepath.Join(work, "envs")); len(left) != 0 {
		t.Fatalf("the work dir holds %v", left)
	}
}
