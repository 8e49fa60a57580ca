package agent_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// snapshots serves archives by artifact id and signs links to them, as the
// artifacts service would.
type snapshots struct {
	mu    sync.Mutex
	data  map[string][]byte
	hits  map[string]int // downloads, by artifact
	srv   *httptest.Server
	store interface {
		PutArtifact(context.Context, domain.Artifact) error
		SealArtifact(context.Context, domain.Artifact) error
	}
}

func newSnapshots(t *testing.T) *snapshots {
	s := &snapshots{data: map[string][]byte{}, hits: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		b, ok := s.data[strings.TrimPrefix(r.URL.Path, "/")]
		s.hits[strings.TrimPrefix(r.URL.Path, "/")]++
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *snapshots) LinkFor(_ context.Context, a domain.Artifact, ttl time.Duration) (domain.Link, error) {
	return domain.Link{URL: s.srv.URL + "/" + a.ID, Expires: apitest.Start.Add(ttl)}, nil
}

// add stores a sealed artifact of acme holding data.
func (s *snapshots) add(t *testing.T, id string, data []byte) {
	t.Helper()
	s.addAt(t, id, data, "application/x-tar", apitest.Start)
}

// addAs is add of an artifact of that content type.
func (s *snapshots) addAs(t *testing.T, id string, data []byte, contentType string) {
	t.Helper()
	s.addAt(t, id, data, contentType, apitest.Start)
}

// addAt is addAs for a stack whose clock reads now.
func (s *snapshots) addAt(t *testing.T, id string, data []byte, contentType string, now time.Time) {
	t.Helper()
	s.mu.Lock()
	s.data[id] = data
	s.mu.Unlock()
	sum := sha256.Sum256(data)
	sealed := now.Add(-time.Hour)
	art := domain.Artifact{
		ID: id, Name: id + ".tar", Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), ContentType: contentType,
		KeyVersion: 1, CreatedBy: "alice", Created: sealed, Expires: now.Add(24 * time.Hour),
		State: domain.ArtifactSealed, Sealed: &sealed, OrgID: "acme", Key: "orgs/acme/artifacts/" + id + "/data",
		Labels: map[string]string{}, Segments: []domain.Segment{{Name: "data", Size: int64(len(data)), Objects: 1}}, Chunks: 1, SealedBytes: int64(len(data)),
	}
	open := art
	open.State = domain.ArtifactOpen
	ctx := context.Background()
	if err := s.store.PutArtifact(ctx, open); err != nil {
		t.Fatal(err)
	}
	if err := s.store.SealArtifact(ctx, art); err != nil {
		t.Fatal(err)
	}
}

// A lease from a snapshot restores it into the environment's folder (as
// root: every file its user's) and reports restored; a snapshot whose links
// would carry a write out of the folder fails the environment with an error
// naming the entry, and nothing lands outside.
func TestSnapshotRestoreIsConfined(t *testing.T) {
	snaps := newSnapshots(t)
	s := newStackLinks(t, snaps, domain.Template{
		Name: "restore", Workdir: "work", Command: []string{"sh", "-c", `cat ../link > seen.tmp && mv seen.tmp seen; exec sleep 3600`},
	})
	snaps.store = s.Store
	base := t.TempDir()
	work, sibling := filepath.Join(base, "agent"), filepath.Join(base, "sibling")
	for _, d := range []string{work, sibling} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.runAgentIn(t, work, 300*time.Millisecond)

	snaps.add(t, "art_good", tarOf(t, dir("work/"), file("work/hello.txt", "hello"), symlink("link", "work/hello.txt"),
		hardlink("work/again.txt", "work/hello.txt")).Bytes())
	good := s.leaseSnapshot(t, "restore", "art_good")
	e := s.wait(t, good, domain.StateReady)
	root := filepath.Join(work, "envs", good)
	if e.Restored == nil || e.Restored.Key != "art_good" || e.Restored.Files != 2 || e.Restored.Root != root {
		t.Fatalf("restored: %+v", e.Restored)
	}
	seen := filepath.Join(root, "work", "seen")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(seen); string(b) == "hello" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command did not read the restored file")
		}
	}
	owner := func(name string) uint32 {
		st, err := os.Lstat(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Uid
	}
	for _, name := range []string{"work", "work/hello.txt", "link", "work/again.txt"} {
		if got, want := owner(name), owner("."); got != want {
			t.Errorf("%s is owned by %d, the environment's folder by %d", name, got, want)
		}
	}

	// s -> . makes s/s/s/x, textually <root>/x/../../../sibling = <root>/sibling,
	// really <root>/../../../sibling: the sibling of the work dir.
	snaps.add(t, "art_evil", tarOf(t, symlink("s", "."), symlink("s/s/s/x", "../../../sibling"), file("x/evil", "out")).Bytes())
	evil := s.leaseSnapshot(t, "restore", "art_evil")
	failed := s.wait(t, evil, domain.StateFailed)
	if !strings.Contains(failed.Error, `"x/evil"`) || !strings.Contains(failed.Error, "outside the folder") {
		t.Fatalf("the error does not say which entry and why: %q", failed.Error)
	}
	if entries, _ := os.ReadDir(sibling); len(entries) != 0 {
		t.Fatalf("the sibling folder holds %v", entries)
	}
	if _, err := os.Stat(filepath.Join(work, "envs", evil)); !os.IsNotExist(err) {
		t.Fatalf("the failed environment's folder is left: %v", err)
	}
}

func (s *stack) leaseSnapshot(t *testing.T, template, snapshot string) string {
	t.Helper()
	r := s.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{"template": template, "snapshot": snapshot})
	if r.Status != 201 {
		t.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	var out struct {
		Environment domain.Environment `json:"environment"`
	}
	r.JSON(t, &out)
	return out.Environment.ID
}
