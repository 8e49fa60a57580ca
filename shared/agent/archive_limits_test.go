package agent_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/archive/archivetest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
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

// checkpointOf is a checkpoint archive (.tar.zst) that holds only its
// manifest, listing files.
func checkpointOf(t *testing.T, files ...domain.CheckpointFile) []byte {
	t.Helper()
	b, err := json.Marshal(domain.CheckpointManifest{Version: 1, Files: files})
	if err != nil {
		t.Fatal(err)
	}
	var tarred bytes.Buffer
	tw := tar.NewWriter(&tarred)
	if err := tw.WriteHeader(&tar.Header{Name: domain.CheckpointManifestEntry, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b))}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write(b)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return zst(t, tarred.Bytes())
}

// Through the agent, a crafted checkpoint fails its environment and the
// failure reaches the service: the audit's checkpoint (2,000 names of 1 MB)
// with a clear, short error; and a restore that fails with an error of
// several MB (the name limits turned off, a manifest path of 2 MB) with
// that error cut to what the service stores, rather than a report the
// service refuses for its size, which would leave the environment
// starting with its quota slot. Both release the quota.
func TestCraftedCheckpointsFailTheirEnvironments(t *testing.T) {
	snaps := newSnapshots(t)
	s := newStackLinks(t, snaps, domain.Template{Name: "restore", Command: []string{"sleep", "3600"}})
	snaps.store = s.Store
	s.runAgentWith(t, t.TempDir(), 300*time.Millisecond, func(c *agent.Config) {
		c.NoWarm = true
		c.Archives.MaxNameBytes = -1
		c.Archives.MaxNamesBytes = 4 << 20
	})
	long, err := archivetest.LongNames(2000, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	snaps.addAs(t, "art_names", long, domain.CheckpointContentType)
	snaps.addAs(t, "art_huge", checkpointOf(t, domain.CheckpointFile{Path: strings.Repeat("a", 2<<20), Type: domain.CheckpointTypeFile}), domain.CheckpointContentType)
	for _, c := range []struct {
		snapshot string
		want     []string
	}{
		{"art_names", []string{"checkpoint art_names: ", "of names (agent limit -archive-max-names), at entry"}},
		{"art_huge", []string{"checkpoint art_huge: aaaa", "aaaa … aaaa", "file name too long"}},
	} {
		e := s.wait(t, s.leaseSnapshot(t, "restore", c.snapshot), domain.StateFailed)
		for _, w := range c.want {
			if !strings.Contains(e.Error, w) {
				t.Errorf("%s: the error lacks %q: %.200q…", c.snapshot, w, e.Error)
			}
		}
		if len(e.Error) > nodes.MaxErrorBytes {
			t.Errorf("%s: the error is %d bytes, more than the service stores", c.snapshot, len(e.Error))
		}
	}
	qs, _ := s.Store.ListQuotas(context.Background(), "acme")
	for _, q := range qs {
		if q.Running != 0 {
			t.Fatalf("%s running %d: a failed environment kept its quota slot", q.Template, q.Running)
		}
	}
}

// With the agent's default limits, the audit's checkpoint fails its
// environment at its first name, with an error that names the limit and
// is short itself.
func TestAuditCheckpointFailsItsEnvironment(t *testing.T) {
	snaps := newSnapshots(t)
	s := newStackLinks(t, snaps, domain.Template{Name: "restore", Command: []string{"sleep", "3600"}})
	snaps.store = s.Store
	s.runAgentWith(t, t.TempDir(), 300*time.Millisecond, func(c *agent.Config) { c.NoWarm = true })
	long, err := archivetest.LongNames(2000, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	snaps.addAs(t, "art_names", long, domain.CheckpointContentType)
	e := s.wait(t, s.leaseSnapshot(t, "restore", "art_names"), domain.StateFailed)
	want := `checkpoint art_names: a name of 976.6 KiB exceeds 4096 bytes (agent limit -archive-max-name), at entry "aaaa`
	if !strings.HasPrefix(e.Error, want) || len(e.Error) > 300 {
		t.Fatalf("error %q, want one beginning %q", e.Error, want)
	}
}
