package nodes_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// sealArtifact stores a sealed artifact of acme that expires at expires.
func (e *env) sealArtifact(t *testing.T, id string, expires time.Time) domain.Artifact {
	t.Helper()
	ctx := context.Background()
	sealed := apitest.Start.Add(-time.Hour)
	art := domain.Artifact{
		ID: id, Name: "share-src.tar.zst", Size: 10, SHA256: strings.Repeat("b", 64), ContentType: "application/zstd",
		KeyVersion: 1, CreatedBy: "bob", Created: sealed, Expires: expires,
		State: domain.ArtifactSealed, Sealed: &sealed, OrgID: "acme", Key: "orgs/acme/artifacts/" + id + "/data",
		Labels: map[string]string{}, Segments: []domain.Segment{{Name: "data", Size: 10, Objects: 1}}, Chunks: 1, SealedBytes: 10,
	}
	open := art
	open.State = domain.ArtifactOpen
	if err := e.Store.PutArtifact(ctx, open); err != nil {
		t.Fatal(err)
	}
	if err := e.Store.SealArtifact(ctx, art); err != nil {
		t.Fatal(err)
	}
	return art
}

// A claim carries, for each share with files, a signed link with the size
// and SHA-256 to check, and where to unpack it; shares without files are
// not in it.
func TestClaimCarriesShareLinks(t *testing.T) {
	e := newEnv(t)
	art := e.sealArtifact(t, "art_share1", apitest.Start.Add(24*time.Hour))
	tok := e.credential(t, apitest.AliceToken, "local")
	node := e.register(t, tok, 2)
	id := e.lease(t, apitest.BobToken, map[string]any{"template": "shell", "shares": []map[string]any{{"name": "src", "artifact": art.ID, "files": []string{"main.go"}}}})
	c, r := e.claim(t, tok, node, "0s")
	if c == nil || c.Environment.ID != id || len(c.Shares) != 1 {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	sh := c.Shares[0]
	if sh.Name != "src" || sh.EnvPath != "/workspace" || sh.Archive.ID != art.ID || sh.Archive.Size != art.Size || sh.Archive.SHA256 != art.SHA256 ||
		!strings.Contains(sh.Archive.URL, art.Key) || !strings.Contains(sh.Archive.URL, nodes.SnapshotLinkTTL.String()) {
		t.Fatalf("share %+v", sh)
	}
	if c.Snapshot != nil || len(c.Environment.Shares) != 1 || c.Environment.Shares[0].Artifact != art.ID {
		t.Fatalf("claimed environment %+v", c.Environment.Shares)
	}

	// A lease that sent names only has no share to fetch.
	e.lease(t, apitest.BobToken, map[string]any{"template": "shell", "shares": []map[string]any{{"name": "src", "files": []string{"main.go"}}}})
	if c, r := e.claim(t, tok, node, "0s"); c == nil || c.Shares == nil || len(c.Shares) != 0 {
		t.Fatalf("claim without files: %d %s", r.Status, r.Body)
	}
}

// A share's artifact that expired between the lease and the claim fails the
// environment with an error naming it (quota released once), as an expired
// snapshot does, and the claim goes on to the next one.
func TestClaimOfAnExpiredShareFailsIt(t *testing.T) {
	e := newEnv(t)
	art := e.sealArtifact(t, "art_brief", apitest.Start.Add(time.Minute))
	tok := e.credential(t, apitest.AliceToken, "local")
	node := e.register(t, tok, 2)
	gone := e.lease(t, apitest.BobToken, map[string]any{"template": "shell", "shares": []map[string]any{{"name": "src", "artifact": art.ID}}})
	e.Clock.Advance(2 * time.Minute)
	next := e.lease(t, apitest.BobToken, map[string]any{"template": "sleeper"})
	c, r := e.claim(t, tok, node, "0s")
	if c == nil || c.Environment.ID != next {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	got := e.get(t, apitest.BobToken, gone)
	if got.State != domain.StateFailed || got.StopReason != nodes.StopFailed ||
		got.Error != `artifact "art_brief" of share "src" is no longer a sealed, unexpired artifact` {
		t.Fatalf("environment of the expired share: %s %q", got.State, got.Error)
	}
	if n := e.running(t, "acme", "shell"); n != 0 {
		t.Fatalf("running %d", n)
	}
}
