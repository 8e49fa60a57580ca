package artifacts_test

import (
	"context"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/domain"
)

// A put of a new artifact that the SDK sent twice (its first attempt was
// written but its answer lost, as on a busy host) finds its own item and
// succeeds; another item under the same id is still refused.
func TestPutArtifactRetriedFindsItsOwnItem(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	a := domain.Artifact{
		ID: "art_retriedput000000000", OrgID: "acme", Project: "p", Name: "n", Size: 3, SHA256: "ab",
		ContentType: "text/plain", Labels: map[string]string{"k": "v"}, CreatedBy: "bob",
		Created: now, Expires: now.Add(time.Hour), State: domain.ArtifactOpen,
	}
	if err := e.Store.PutArtifact(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := e.Store.PutArtifact(ctx, a); err != nil {
		t.Fatalf("the same put again: %v", err)
	}
	b := a
	b.Name = "another"
	if err := e.Store.PutArtifact(ctx, b); domain.ErrorCode(err) != domain.CodeConflict {
		t.Fatalf("another artifact under the same id: %v, want conflict", err)
	}
}
