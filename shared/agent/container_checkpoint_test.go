//go:build linux

package agent_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/environments"
)

// lateArtifacts is the artifacts service of a stack, set once the stack's
// store exists: it signs snapshot links and keeps checkpoints.
type lateArtifacts struct{ *artifacts.Service }

// withArtifacts is newStack whose nodes keep checkpoints in a local S3.
func withArtifacts(t *testing.T, templates ...domain.Template) (*stack, *lateArtifacts) {
	t.Helper()
	lk := &lateArtifacts{}
	s := newStackLinks(t, lk, templates...)
	s.Clock.Set(time.Now()) // presigned URLs and tickets are judged by the real clock
	s3 := devstack.NewTestS3(t)
	ctx := context.Background()
	blobs := blob.New(blob.Options{Client: s3.Client(ctx), Bucket: s3.Bucket, Clock: s.Clock})
	lk.Service = artifacts.NewService(s.Store, blobs, s.Clock, artifacts.Options{})
	return s, lk
}

// checkpoint asks for a checkpoint of env and long-polls until it ends.
func (s *stack) checkpoint(t *testing.T, env string) environments.CheckpointAnswer {
	t.Helper()
	r := s.Do("POST", "/v1/environments/"+env+"/checkpoints?wait=20s", apitest.BobToken, nil)
	if r.Status != 200 && r.Status != 202 {
		t.Fatalf("checkpoint: %d %s", r.Status, r.Body)
	}
	var ans environments.CheckpointAnswer
	r.JSON(t, &ans)
	for deadline := time.Now().Add(3 * time.Minute); !ans.Checkpoint.Done(); {
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint still %s", ans.Checkpoint.State)
		}
		r = s.Do("GET", "/v1/environments/"+env+"/checkpoints/"+ans.Checkpoint.ID+"?wait=20s", apitest.BobToken, nil)
		r.JSON(t, &ans)
	}
	if ans.Checkpoint.State != domain.CheckpointSealed || ans.Artifact == nil {
		t.Fatalf("checkpoint %+v", ans.Checkpoint)
	}
	return ans
}

// manifestOf downloads a checkpoint artifact and reads its manifest.
func (s *stack) manifestOf(t *testing.T, lk *lateArtifacts, a domain.Artifact) domain.CheckpointManifest {
	t.Helper()
	a, err := s.Store.GetArtifact(context.Background(), "acme", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	link, err := lk.LinkFor(context.Background(), a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(link.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	zr, err := zstd.NewReader(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatal("no manifest")
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == domain.CheckpointManifestEntry {
			var m domain.CheckpointManifest
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
}

// the tree the container makes in its work folder, once.
const savedBox = `cd /work
[ -e made ] || {
	mkdir -p www/a/b && echo alpha > www/a/one.txt && chmod 640 www/a/one.txt && : > www/empty &&
	dd if=/dev/urandom of=www/a/b/rand.bin bs=1k count=200 2>/dev/null && ln -s one.txt www/a/link &&
	chmod 750 www/a/b && touch made; }
exec httpd -f -p "$PORT" -h /work/www`

// A container's checkpoint holds its writable layer, taken paused under
// runc; a lease from it restores the work folder's files, verified against
// the manifest, so that the copy's own checkpoint lists them the same.
func TestContainerCheckpointFork(t *testing.T) {
	ref := busyboxRef(t)
	s, lk := withArtifacts(t, domain.Template{
		Name: "saved", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref}, Command: []string{"sh", "-c", savedBox},
		Workdir: "/work", Exports: map[string]domain.Export{"web": {Port: 8080}},
	})
	s.runAgentWith(t, t.TempDir(), time.Second, func(c *agent.Config) { c.ReadyTimeout = time.Minute })

	orig := s.lease(t, "saved")
	s.waitLong(t, orig, domain.StateReady)
	first := s.checkpoint(t, orig)
	m := s.manifestOf(t, lk, *first.Artifact)
	if m.Frozen != "runc pause" {
		t.Errorf("frozen by %q, want runc pause", m.Frozen)
	}
	work := func(m domain.CheckpointManifest) []domain.CheckpointFile {
		var out []domain.CheckpointFile
		for _, f := range m.Files {
			if strings.HasPrefix(f.Path, "work/") {
				out = append(out, f)
			}
		}
		return out
	}
	want := work(m)
	if len(want) < 7 {
		t.Fatalf("the checkpoint's work folder: %+v", want)
	}

	r := s.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{"template": "saved", "snapshot": first.Artifact.ID})
	if r.Status != 201 {
		t.Fatalf("lease from the checkpoint: %d %s", r.Status, r.Body)
	}
	var leased environments.Leased
	r.JSON(t, &leased)
	copyEnv := s.waitLong(t, leased.Environment.ID, domain.StateReady)
	if copyEnv.Restored == nil || copyEnv.Restored.Key != first.Artifact.ID || copyEnv.Restored.Files < 4 {
		t.Fatalf("restored %+v", copyEnv.Restored)
	}
	if got := s.getThroughTunnel(t, copyEnv.ID, copyEnv.Exports[0].Target, "/a/one.txt"); got != "alpha\n" {
		t.Errorf("the copy serves %q", got)
	}
	second := s.checkpoint(t, copyEnv.ID)
	got := work(s.manifestOf(t, lk, *second.Artifact))
	if len(got) != len(want) {
		t.Fatalf("the copy's work folder:\n%+v\nthe original's:\n%+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("the copy's %+v, the original's %+v", got[i], want[i])
		}
	}
	// The original ran on.
	if e := s.waitLong(t, orig, domain.StateReady); e.State != domain.StateReady {
		t.Fatal(e.State)
	}
}
