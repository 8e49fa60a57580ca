package agent_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// zst compresses b as the CLI packs shares.
func zst(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw, err := zstd.NewWriter(&out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// sharer reads its share's file as it starts (an empty "seen" when the file
// is not there), from its workdir /workspace, where the share src lands at
// /workspace/src. It is warm, so a lease without files could be handed a
// process started before any file arrived.
var sharer = domain.Template{
	Name: "sharer", Workdir: "/workspace", Warm: 1,
	Command: []string{"sh", "-c", `cat src/hello.txt > seen.tmp 2>/dev/null; mv seen.tmp seen; exec sleep 3600`},
	Shares:  []domain.TemplateShare{{Name: "src", Path: "/workspace/src", Direction: "in"}},
}

func (s *stack) leaseShare(t *testing.T, artifact string) string {
	t.Helper()
	r := s.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{
		"template": "sharer", "shares": []map[string]any{{"name": "src", "artifact": artifact, "files": []string{"hello.txt"}}},
	})
	if r.Status != 201 {
		t.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	var out struct {
		Environment domain.Environment `json:"environment"`
	}
	r.JSON(t, &out)
	return out.Environment.ID
}

// A share's archive is unpacked at the share's path under the environment's
// folder before the command starts (never into a warm process started
// before), everything its user's; an archive that would write outside the
// share's folder fails the environment naming the share, the entry and why;
// bytes that are not the artifact's are never unpacked.
func TestShareIsUnpackedBeforeTheCommand(t *testing.T) {
	snaps := newSnapshots(t)
	s := newStackLinks(t, snaps, sharer)
	snaps.store = s.Store
	base := t.TempDir()
	work, sibling := filepath.Join(base, "agent"), filepath.Join(base, "sibling")
	for _, d := range []string{work, sibling} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.runAgentIn(t, work, 300*time.Millisecond)
	// The warm process has started (and found no file) before the lease.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(work, "envs", "warm-*", "workspace", "seen")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the warm process did not start")
		}
	}
	time.Sleep(200 * time.Millisecond) // the warm process passes its readiness check

	snaps.add(t, "art_share", zst(t, tarOf(t, file("hello.txt", "hello"), dir("sub/"), file("sub/deep.txt", "deep"), symlink("again", "hello.txt")).Bytes()))
	good := s.leaseShare(t, "art_share")
	s.wait(t, good, domain.StateReady)
	root := filepath.Join(work, "envs", good)
	// Ready (no exports) means up for 50 ms, not that the command has
	// written what it saw: wait for the file, then judge its content.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(root, "workspace", "seen")); err == nil {
			break
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "workspace", "seen")); err != nil || string(b) != "hello" {
		t.Fatalf("the command saw %q (%v): the files were not there when it started", b, err)
	}
	owner := func(name string) uint32 {
		st, err := os.Lstat(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Uid
	}
	for _, name := range []string{"workspace", "workspace/src", "workspace/src/hello.txt", "workspace/src/sub/deep.txt", "workspace/src/again"} {
		if got, want := owner(name), owner("."); got != want {
			t.Errorf("%s is owned by %d, the environment's folder by %d", name, got, want)
		}
	}

	// s -> . makes s/s/s/x lead, through the links, out of the share's
	// folder: the write x/evil is refused, and names what was refused.
	snaps.add(t, "art_evil", zst(t, tarOf(t, symlink("s", "."), symlink("s/s/s/x", "../../../sibling"), file("x/evil", "out")).Bytes()))
	evil := s.wait(t, s.leaseShare(t, "art_evil"), domain.StateFailed)
	for _, want := range []string{`share "src"`, `"x/evil"`, "outside the folder"} {
		if !strings.Contains(evil.Error, want) {
			t.Fatalf("the error lacks %q: %q", want, evil.Error)
		}
	}
	if entries, _ := os.ReadDir(sibling); len(entries) != 0 {
		t.Fatalf("the sibling folder holds %v", entries)
	}

	// Other bytes than the artifact's (of the same size) are not unpacked.
	snaps.add(t, "art_swapped", zst(t, tarOf(t, file("hello.txt", "hello")).Bytes()))
	snaps.mu.Lock()
	swapped := bytes.Clone(snaps.data["art_swapped"])
	swapped[len(swapped)-1] ^= 0xff
	snaps.data["art_swapped"] = swapped
	snaps.mu.Unlock()
	bad := s.wait(t, s.leaseShare(t, "art_swapped"), domain.StateFailed)
	if !strings.Contains(bad.Error, `share "src"`) || !strings.Contains(bad.Error, "SHA-256") {
		t.Fatalf("a download that is not the artifact: %q", bad.Error)
	}
}
