package environments_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// putArtifact stores an artifact of org in state, expiring at expires.
func putArtifact(t *testing.T, e *apitest.Env, org, id string, state string, expires time.Time) {
	t.Helper()
	created := apitest.Start.Add(-time.Hour)
	art := domain.Artifact{
		ID: id, Name: "share-src.tar.zst", Size: 10, SHA256: strings.Repeat("c", 64), ContentType: "application/zstd",
		KeyVersion: 1, CreatedBy: "bob", Created: created, Expires: expires, State: domain.ArtifactOpen,
		OrgID: org, Key: "orgs/" + org + "/artifacts/" + id + "/data", Labels: map[string]string{},
		Segments: []domain.Segment{{Name: "data", Size: 10, Objects: 1}}, Chunks: 1, SealedBytes: 10,
	}
	ctx := context.Background()
	if err := e.Store.PutArtifact(ctx, art); err != nil {
		t.Fatal(err)
	}
	if state == domain.ArtifactSealed {
		art.State, art.Sealed = domain.ArtifactSealed, &created
		if err := e.Store.SealArtifact(ctx, art); err != nil {
			t.Fatal(err)
		}
	}
}

// A share may carry its files as an artifact: a sealed, unexpired one of the
// caller's organization, kept on the environment's share and shown where
// the share is; anything else is 422 naming shares[i].artifact, with
// nothing leased.
func TestLeaseShareArtifact(t *testing.T) {
	e := newEnv(t)
	later := apitest.Start.Add(24 * time.Hour)
	putArtifact(t, e, "acme", "art_files", domain.ArtifactSealed, later)
	putArtifact(t, e, "acme", "art_open", domain.ArtifactOpen, later)
	putArtifact(t, e, "acme", "art_brief", domain.ArtifactSealed, apitest.Start.Add(time.Minute))
	putArtifact(t, e, "globex", "art_theirs", domain.ArtifactSealed, later)
	e.Clock.Advance(2 * time.Minute)

	for _, id := range []string{"art_nope", "art_open", "art_brief", "art_theirs", strings.Repeat("a", 101)} {
		r := e.Do(http.MethodPost, "/v1/environments", apitest.BobToken, map[string]any{
			"template": "shell", "shares": []map[string]any{{"name": "src", "artifact": id}},
		})
		if r.Status != http.StatusUnprocessableEntity || r.Map(t)["field"] != "shares[0].artifact" {
			t.Errorf("artifact %.20s: %d %s", id, r.Status, r.Body)
		}
	}
	if run, live := running(t, e, "shell"); run != 0 || live != 0 {
		t.Fatalf("refused leases left running %d, live %d", run, live)
	}

	l := lease(t, e, apitest.BobToken, map[string]any{
		"template": "shell", "shares": []map[string]any{{"name": "src", "localPath": "/home/bob/web", "files": []string{"a.go", "x.log"}, "artifact": "art_files"}},
	})
	for _, where := range []map[string]any{l.Environment, l.Config} {
		sh := where["shares"].([]any)[0].(map[string]any)
		if sh["artifact"] != "art_files" || len(sh["files"].([]any)) != 1 {
			t.Fatalf("share %v", sh)
		}
	}
	got := e.Do(http.MethodGet, "/v1/environments/"+l.Environment["id"].(string), apitest.BobToken, nil).Map(t)
	if sh := got["shares"].([]any)[0].(map[string]any); sh["artifact"] != "art_files" {
		t.Fatalf("read back: %v", sh)
	}
	// A share without files shows an empty artifact.
	l = lease(t, e, apitest.BobToken, map[string]any{"template": "shell", "shares": []map[string]any{{"name": "src"}}})
	if sh := l.Environment["shares"].([]any)[0].(map[string]any); sh["artifact"] != "" {
		t.Fatalf("share without files: %v", sh)
	}
}
