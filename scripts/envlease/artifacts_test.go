package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

func TestArtifactsPushPullLink(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.BobToken)

	data := make([]byte, 3<<20+17)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(u.home, "src", "build.tar.gz")
	if err := os.Mkdir(filepath.Dir(src), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)

	r := u.run("", "artifacts", "push", src, "--expires", "2h", "-o", "json")
	if r.code != 0 {
		t.Fatalf("push: exit %d: %s", r.code, r.stderr)
	}
	// Standard error is not a terminal here: no progress bar, only the message.
	if strings.ContainsAny(r.stderr, "\r%") || !strings.Contains(r.stderr, "Pushed") {
		t.Fatalf("push wrote to a pipe: %q", r.stderr)
	}
	var art domain.Artifact
	if err := json.Unmarshal([]byte(r.stdout), &art); err != nil {
		t.Fatal(err)
	}
	if art.State != domain.ArtifactSealed || art.Name != "build.tar.gz" || art.Size != int64(len(data)) ||
		art.SHA256 != hex.EncodeToString(sum[:]) || art.ContentType != "application/gzip" {
		t.Fatalf("pushed %+v", art)
	}

	var list struct {
		Artifacts []domain.Artifact `json:"artifacts"`
	}
	u.json(&list, "artifacts", "ls")
	if len(list.Artifacts) != 1 || list.Artifacts[0].ID != art.ID {
		t.Fatalf("ls: %+v", list)
	}
	contains(t, "artifacts ls", u.ok("artifacts", "ls"), art.ID, "build.tar.gz", "3.0 MiB")
	contains(t, "artifacts get", u.ok("artifacts", "get", art.ID), "STATE", "sealed", art.SHA256)

	// pull: to its name in the current folder, then to a path, then to stdout.
	u.ok("artifacts", "pull", art.ID)
	u.ok("artifacts", "pull", art.ID, "--to", filepath.Join(u.home, "copy.bin"))
	for _, path := range []string{filepath.Join(u.home, "build.tar.gz"), filepath.Join(u.home, "copy.bin")} {
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes, %v", path, len(got), err)
		}
	}
	if r := u.fails(exitUsage, "", "artifacts", "pull", art.ID, "--to", filepath.Join(u.home, "copy.bin")); !strings.Contains(r.stderr, "--force") {
		t.Fatalf("pull over a file: %s", r.stderr)
	}
	if out := u.ok("artifacts", "pull", art.ID, "--to", "-"); out != string(data) {
		t.Fatalf("pull --to -: %d bytes", len(out))
	}
	leftovers, _ := filepath.Glob(filepath.Join(u.home, ".*.part"))
	if len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}

	// link: plain HTTP, no token.
	url := strings.TrimSpace(u.ok("artifacts", "link", art.ID, "--expires", "10m"))
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !bytes.Equal(got, data) {
		t.Fatalf("link: %d, %d bytes", res.StatusCode, len(got))
	}
	var link domain.Link
	u.json(&link, "artifacts", "link", art.ID)
	if !strings.HasPrefix(link.URL, "http") || link.Expires.IsZero() {
		t.Fatalf("link -o json: %+v", link)
	}

	u.fails(exitNotFound, "", "artifacts", "pull", "art_doesnotexist")
	u.fails(exitNotFound, "", "artifacts", "link", "art_doesnotexist")
}

// A file larger than the part size goes up in parts, and comes back whole.
func TestArtifactsPushMultipart(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	src := filepath.Join(u.home, "disk.img")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	// Mostly a hole: the test needs the size, not random bytes, and a
	// distinct byte at each end shows the parts are in order.
	if _, err := f.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tail"), client.DefaultPartSize+100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var art domain.Artifact
	u.json(&art, "artifacts", "push", src)
	if art.State != domain.ArtifactSealed || art.Chunks != 2 || art.Size != client.DefaultPartSize+104 {
		t.Fatalf("pushed %+v", art)
	}
	u.ok("artifacts", "pull", art.ID, "--to", filepath.Join(u.home, "back.img"))
	want, _ := os.ReadFile(src)
	got, _ := os.ReadFile(filepath.Join(u.home, "back.img"))
	if !bytes.Equal(got, want) {
		t.Fatal("the pulled file differs")
	}
}
