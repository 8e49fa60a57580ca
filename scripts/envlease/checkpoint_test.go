package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// savedTemplate makes, the first time it runs in a folder, a tree of every
// kind a checkpoint keeps (nested folders, modes, an empty file, a binary
// one, a symbolic link, a folder only its owner enters), then serves; run
// again where the tree is (a restored checkpoint), it only serves. Ready
// waits for its port, so the tree is complete when it is ready.
var savedTemplate = domain.Template{
	Name: "saved", Description: "makes a tree of files once, then serves",
	Command: []string{"sh", "-c", `[ -e made ] || {
	mkdir -p a/b/c && printf alpha > a/one.txt && chmod 0640 a/one.txt &&
	: > empty && head -c 300000 /dev/urandom > a/b/c/rand.bin && chmod 0755 a/b/c/rand.bin &&
	ln -s one.txt a/link && mkdir private && echo secret > private/x && chmod 0700 private &&
	chmod 0750 a/b && touch made; } && exec python3 -m http.server "$PORT" --bind 127.0.0.1`},
	Runtime:  "process",
	Timeouts: domain.Timeouts{Idle: domain.Duration(30 * time.Minute), Hard: domain.Duration(6 * time.Hour)},
	Exports:  map[string]domain.Export{"web": {}},
	Quota:    domain.Quota{MaxLeases: 6},
}

// A fork's copy holds every file of the original byte for byte, with its
// mode, folders, link and empty file: the copy's own checkpoint has the
// same manifest. A checkpoint whose files were changed is refused when it
// is restored, naming the file; pause deletes the environment and resume
// brings it back; another organization's environment is 404, one that is
// not running 409.
func TestCheckpointForkPauseResume(t *testing.T) {
	s := clienttest.Start(t, clienttest.WithTemplates("acme", savedTemplate))
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	ctx := context.Background()
	bob, err := client.New(s.URL, clienttest.BobToken)
	if err != nil {
		t.Fatal(err)
	}

	var leased client.Leased
	decode(t, u.ok("lease", "-t", "saved", "--no-sandbox", "--wait", "-o", "json"), &leased)
	orig := leased.Environment.ID

	var ans client.CheckpointAnswer
	decode(t, u.ok("checkpoint", orig, "--name", "orig.tar.zst", "-o", "json"), &ans)
	if ans.Checkpoint.State != domain.CheckpointSealed || ans.Artifact == nil || ans.Artifact.State != domain.ArtifactSealed ||
		ans.Artifact.ContentType != domain.CheckpointContentType || ans.Artifact.Labels[domain.LabelCheckpointTemplate] != "saved" ||
		ans.Artifact.Labels[domain.LabelCheckpointOf] != orig || ans.Artifact.Name != "orig.tar.zst" {
		t.Fatalf("checkpoint %+v artifact %+v", ans.Checkpoint, ans.Artifact)
	}
	m, files := pullCheckpoint(t, bob, ans.Artifact.ID)
	want := map[string]domain.CheckpointFile{
		"a":              {Path: "a", Type: "dir", Mode: 0o755},
		"a/b":            {Path: "a/b", Type: "dir", Mode: 0o750},
		"a/one.txt":      {Path: "a/one.txt", Type: "file", Mode: 0o640, Size: 5, SHA256: "8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8"},
		"a/link":         {Path: "a/link", Type: "symlink", Mode: 0o777, Target: "one.txt"},
		"empty":          {Path: "empty", Type: "file", Mode: 0o644, SHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		"private":        {Path: "private", Type: "dir", Mode: 0o700},
		"private/x":      {Path: "private/x", Type: "file", Mode: 0o644, Size: 7, SHA256: "b37e50cedcd3e3f1ff64f4afc0422084ae694253cf399326868e07a35f4a45fb"},
		"a/b/c/rand.bin": {Path: "a/b/c/rand.bin", Type: "file", Mode: 0o755, Size: 300000},
	}
	got := map[string]domain.CheckpointFile{}
	for _, f := range m.Files {
		got[f.Path] = f
	}
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			t.Errorf("the manifest lacks %s", p)
		case g.Type != w.Type || g.Mode != w.Mode || g.Target != w.Target || (w.Type == "file" && g.Size != w.Size):
			t.Errorf("%s: %+v, want %+v", p, g, w)
		case w.SHA256 != "" && g.SHA256 != w.SHA256:
			t.Errorf("%s: sha256 %s, want %s", p, g.SHA256, w.SHA256)
		}
	}
	if !bytes.Equal(files["a/one.txt"], []byte("alpha")) || len(files["a/b/c/rand.bin"]) != 300000 {
		t.Errorf("archive contents: one.txt %q, rand.bin %d bytes", files["a/one.txt"], len(files["a/b/c/rand.bin"]))
	}
	if m.Template != "saved" || m.Environment != orig || m.Frozen == "" {
		t.Errorf("manifest %+v", m)
	}
	t.Logf("packed %d entries, frozen by %s, skipped %v", len(m.Files), m.Frozen, m.Skipped)

	// fork: a copy from a new checkpoint, while the original runs on.
	var copyEnv domain.Environment
	decode(t, u.ok("fork", orig, "--wait", "-o", "json"), &copyEnv)
	if copyEnv.State != domain.StateReady || copyEnv.Restored == nil || copyEnv.Restored.Files < 5 || !strings.HasPrefix(copyEnv.Snapshot, "art_") {
		t.Fatalf("fork: %+v restored %+v", copyEnv, copyEnv.Restored)
	}
	if e, err := bob.GetEnvironment(ctx, orig); err != nil || e.State != domain.StateReady {
		t.Fatalf("the original after fork: %v %v", e.State, err)
	}
	// The copy's own checkpoint lists the same files, byte for byte.
	decode(t, u.ok("checkpoint", copyEnv.ID, "-o", "json"), &ans)
	m2, _ := pullCheckpoint(t, bob, ans.Artifact.ID)
	if !slices.Equal(m.Files, m2.Files) {
		t.Fatalf("the copy differs from the original:\n%+v\n%+v", m.Files, m2.Files)
	}

	// A checkpoint whose file was changed (same size, so only its digest
	// tells) is refused, naming the file; nothing starts.
	tampered := retar(t, bob, ans.Artifact.ID, "a/one.txt", []byte("ALPHA"))
	art, err := bob.Push(ctx, bytes.NewReader(tampered), int64(len(tampered)), client.ArtifactCreate{
		Name: "tampered.tar.zst", ContentType: domain.CheckpointContentType,
		Labels: map[string]string{domain.LabelCheckpointTemplate: "saved"},
	}, client.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := u.fails(1, "", "resume", art.ID, "--wait")
	contains(t, "tampered resume", r.stderr, "a/one.txt differs from its manifest", "SHA-256")

	// pause, then resume: the environment is deleted, and comes back.
	decode(t, u.ok("pause", copyEnv.ID, "-o", "json"), &ans)
	if e, err := bob.GetEnvironment(ctx, copyEnv.ID); err != nil || e.State.Live() && e.State != domain.StateStopping {
		t.Fatalf("paused: %v %v", e.State, err)
	}
	var resumed domain.Environment
	decode(t, u.ok("resume", ans.Artifact.ID, "--wait", "-o", "json"), &resumed)
	if resumed.State != domain.StateReady || resumed.Snapshot != ans.Artifact.ID || resumed.Restored == nil || resumed.Restored.Key != ans.Artifact.ID {
		t.Fatalf("resumed %+v", resumed)
	}

	// Another organization's environment is not found; one that is not
	// running cannot be checkpointed.
	carol, _ := client.New(s.URL, clienttest.CarolToken)
	if _, err := carol.Checkpoint(ctx, orig, client.CheckpointRequest{}, 0); statusOf(err) != 404 {
		t.Fatalf("another organization's: %v", err)
	}
	if _, err := bob.Checkpoint(ctx, copyEnv.ID, client.CheckpointRequest{}, 0); statusOf(err) != 409 {
		t.Fatalf("a deleted one: %v", err)
	}
}

func decode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
}

func statusOf(err error) int {
	var ae *client.Error
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// pullCheckpoint downloads a checkpoint and reads its manifest and files.
func pullCheckpoint(t *testing.T, c *client.Client, id string) (domain.CheckpointManifest, map[string][]byte) {
	t.Helper()
	var buf bytes.Buffer
	if _, err := c.Pull(context.Background(), id, &buf, client.PullOptions{}); err != nil {
		t.Fatal(err)
	}
	var m domain.CheckpointManifest
	files := map[string][]byte{}
	eachEntry(t, buf.Bytes(), func(h *tar.Header, b []byte) {
		if h.Name == domain.CheckpointManifestEntry {
			decode(t, string(b), &m)
		} else if h.Typeflag == tar.TypeReg {
			files[h.Name] = b
		}
	})
	return m, files
}

func eachEntry(t *testing.T, archive []byte, f func(*tar.Header, []byte)) {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		f(h, b)
	}
}

// retar is checkpoint id with the content of name replaced, its manifest kept.
func retar(t *testing.T, c *client.Client, id, name string, content []byte) []byte {
	t.Helper()
	var src bytes.Buffer
	if _, err := c.Pull(context.Background(), id, &src, client.PullOptions{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw, _ := zstd.NewWriter(&out)
	tw := tar.NewWriter(zw)
	eachEntry(t, src.Bytes(), func(h *tar.Header, b []byte) {
		if h.Name == name {
			b = content
			h.Size = int64(len(b))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	})
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
