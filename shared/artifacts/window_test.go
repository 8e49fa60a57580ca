package artifacts_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/artifacts"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/store"
)

// The upload window: when an open artifact's upload requests stop working.
// The record keeps it, and it decides when the expiry job removes what was
// uploaded but never sealed.

func (e *env) rawArtifact(t testing.TB, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.Store.DB().GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(e.Store.Table()), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "ORG#acme"}, "SK": &types.AttributeValueMemberS{Value: "ARTIFACT#" + id}},
	})
	if err != nil || out.Item == nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return out.Item
}

func (e *env) dueSK(t testing.TB, id string) string {
	t.Helper()
	it := e.rawArtifact(t, id)
	pk, _ := it["GSI2PK"].(*types.AttributeValueMemberS)
	sk, _ := it["GSI2SK"].(*types.AttributeValueMemberS)
	if pk == nil || sk == nil || pk.Value != e.Store.ArtifactDuePartition("acme", id) {
		t.Fatalf("%s is not in the due index: %v", id, it)
	}
	return sk.Value
}

func uploadDue(until time.Time, id string) string {
	return store.ArtifactDueSK(until.Add(domain.ArtifactUploadGrace), "acme", id)
}

// Past its window an open artifact cannot be completed: 409, naming the
// renewal, which moves the window (and the artifact's cleanup) so complete
// works again.
func TestCompleteAfterTheWindowNeedsARenewal(t *testing.T) {
	e := newEnv(t)
	data := []byte("uploaded in time, completed too late\n")
	c := e.create(t, apitest.AliceToken, data, nil)
	e.upload(t, c, data)
	if got := e.dueSK(t, c.ID()); got != uploadDue(c.Upload.Expires, c.ID()) {
		t.Fatalf("created: due %s", got)
	}
	a, err := e.Store.GetArtifact(context.Background(), "acme", c.ID())
	if err != nil || !a.UploadUntil.Equal(c.Upload.Expires) {
		t.Fatalf("record's window %v, upload expires %v (%v)", a.UploadUntil, c.Upload.Expires, err)
	}

	e.Clock.Set(c.Upload.Expires)
	r := e.Do(http.MethodPost, "/v1/artifacts/"+c.ID()+"/complete", apitest.AliceToken, nil)
	if r.Status != http.StatusConflict || r.Code() != "conflict" || !strings.Contains(string(r.Body), "/v1/artifacts/"+c.ID()+"/upload") {
		t.Fatalf("complete at the window's end: %d %s", r.Status, r.Body)
	}
	if g := e.Do(http.MethodGet, "/v1/artifacts/"+c.ID(), apitest.AliceToken, nil); g.Map(t)["state"] != "open" {
		t.Fatalf("after the refused complete: %s", g.Body)
	}
	rr, fresh := e.renew(t, apitest.AliceToken, c.ID(), nil)
	if rr.Status != http.StatusOK || !fresh.Upload.Expires.Equal(e.Clock.Now().Add(artifacts.UploadWindow)) {
		t.Fatalf("renew: %d %s", rr.Status, rr.Body)
	}
	if got := e.dueSK(t, c.ID()); got != uploadDue(fresh.Upload.Expires, c.ID()) {
		t.Fatalf("renewed: due %s, want %s", got, uploadDue(fresh.Upload.Expires, c.ID()))
	}
	// The fake clock is an hour ahead of S3's; completing asks S3 with real
	// signatures, and only the record's window is checked against the clock.
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+c.ID()+"/complete", apitest.AliceToken, nil); r.Status != http.StatusOK || r.Map(t)["state"] != "sealed" {
		t.Fatalf("complete after the renewal: %d %s", r.Status, r.Body)
	}
	// Sealed: due at its expiry, as before.
	exp := c.Artifact["expires"].(string)
	expires, _ := time.Parse(time.RFC3339, exp)
	if got := e.dueSK(t, c.ID()); got != store.ArtifactDueSK(expires, "acme", c.ID()) {
		t.Fatalf("sealed: due %s", got)
	}
}

// racingStore lets a test act between the service's read and its renewal write.
type racingStore struct {
	artifacts.Store
	beforeRenew func(a domain.Artifact, until time.Time)
}

func (r racingStore) RenewArtifactUpload(ctx context.Context, a domain.Artifact, until time.Time) error {
	r.beforeRenew(a, until)
	return r.Store.RenewArtifactUpload(ctx, a, until)
}

// Two renewals at once: the recorded window never moves back, so it covers
// the requests of both, and the one that lost the race still answers 200. A
// renewal racing a failure (or the expiry job failing the artifact) is 409.
func TestRenewalRacesKeepTheLatestWindow(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := domain.Principal{OrgID: "acme", UserID: "alice", Role: domain.RoleAdmin}
	blobs := blob.New(blob.Options{Client: e.S3.Client(ctx), Bucket: e.S3.Bucket, Clock: e.Clock})
	var later time.Time
	var act func(a domain.Artifact, until time.Time)
	svc := artifacts.NewService(racingStore{Store: e.Store, beforeRenew: func(a domain.Artifact, until time.Time) { act(a, until) }}, blobs, e.Clock, artifacts.Options{})

	c := e.create(t, apitest.AliceToken, []byte("renewed twice at once"), nil)
	e.Clock.Advance(10 * time.Minute)
	act = func(a domain.Artifact, until time.Time) {
		later = until.Add(time.Minute)
		if err := e.Store.RenewArtifactUpload(ctx, a, later); err != nil {
			t.Fatalf("the other renewal: %v", err)
		}
	}
	out, err := svc.Upload(ctx, p, c.ID())
	if err != nil || len(out.Upload.Parts) != 1 {
		t.Fatalf("renewal that lost the race: %+v %v", out, err)
	}
	if got := e.dueSK(t, c.ID()); got != uploadDue(later, c.ID()) {
		t.Fatalf("due %s, want the later window's %s", got, uploadDue(later, c.ID()))
	}
	// The earlier window, written directly, is refused.
	a, _ := e.Store.GetArtifact(ctx, "acme", c.ID())
	if err := e.Store.RenewArtifactUpload(ctx, a, later.Add(-time.Second)); domain.ErrorCode(err) != domain.CodeConflict {
		t.Fatalf("moving the window back: %v", err)
	}

	act = func(a domain.Artifact, _ time.Time) {
		if err := e.Store.AbandonArtifact(ctx, a.OrgID, a.ID, a.UploadUntil); err != nil {
			t.Fatalf("abandon: %v", err)
		}
	}
	if _, err := svc.Upload(ctx, p, c.ID()); domain.ErrorCode(err) != domain.CodeConflict {
		t.Fatalf("renewal racing the job: %v", err)
	}
	if got := e.dueSK(t, c.ID()); got != uploadDue(later, c.ID()) {
		t.Fatalf("a refused renewal moved the due time: %s", got)
	}
}

// A record written before the window was kept (open, not in the due index)
// joins the index when it is renewed or fails: at the new window's end, or,
// with no window known, at its expiry, which no upload request outlives.
func TestRecordWithoutAWindowJoinsTheDueIndex(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	legacy := func(data []byte, extra map[string]any) created {
		c := e.create(t, apitest.AliceToken, data, extra)
		it := e.rawArtifact(t, c.ID())
		for _, k := range []string{"uploadUntil", "GSI2PK", "GSI2SK"} {
			delete(it, k)
		}
		if _, err := e.Store.DB().PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.Store.Table()), Item: it}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	renewed := legacy([]byte("renewed"), nil)
	_, fresh := e.renew(t, apitest.AliceToken, renewed.ID(), nil)
	if got := e.dueSK(t, renewed.ID()); got != uploadDue(fresh.Upload.Expires, renewed.ID()) {
		t.Fatalf("renewed: due %s", got)
	}

	data := []byte("eleven bytes")
	failed := legacy(data, map[string]any{"size": len(data) - 1})
	if code, _ := put(t, failed.Upload.Parts[0], data); code != http.StatusOK {
		t.Fatalf("upload: %d", code)
	}
	if r := e.Do(http.MethodPost, "/v1/artifacts/"+failed.ID()+"/complete", apitest.AliceToken, nil); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
	expires, _ := time.Parse(time.RFC3339, failed.Artifact["expires"].(string))
	if got := e.dueSK(t, failed.ID()); got != uploadDue(expires, failed.ID()) {
		t.Fatalf("failed: due %s, want %s", got, uploadDue(expires, failed.ID()))
	}
}
