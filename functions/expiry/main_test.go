package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/blob"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/expiry"
)

// The sample EventBridge event goes through the handler against minidyn and
// versitygw: an expired sealed artifact loses its object and becomes a
// tombstone; one not yet expired is left alone.
func TestScheduledEventExpiresArtifacts(t *testing.T) {
	e := apitest.New(t, nil)
	srv := devstack.NewTestS3(t)
	ctx := context.Background()
	client := srv.Client(ctx)
	blobs := blob.New(blob.Options{Client: client, Bucket: srv.Bucket, Clock: e.Clock})
	now := e.Clock.Now()
	for id, expires := range map[string]time.Time{"art_gone": now.Add(-time.Minute), "art_kept": now.Add(time.Hour)} {
		a := domain.Artifact{ID: id, OrgID: "acme", Name: id, Size: 1, SHA256: "00", CreatedBy: "user:bob",
			Created: now.Add(-time.Hour), Expires: expires, State: domain.ArtifactOpen, Key: blob.Key("acme", id),
			KeyVersion: domain.ArtifactKeyVersion}
		if err := e.Store.PutArtifact(ctx, a); err != nil {
			t.Fatal(err)
		}
		if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(a.Key), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
		if err := e.Store.SealArtifact(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	var ev events.EventBridgeEvent
	apitest.Event(t, "scheduled-expiry.json", &ev)
	if ev.DetailType != "Scheduled Event" {
		t.Fatalf("event: %+v", ev)
	}
	var logs bytes.Buffer
	h := handler(e.Store, blobs, e.Clock, slog.New(slog.NewJSONHandler(&logs, nil)), expiry.Options{})

	sum, err := h(ctx, ev)
	if err != nil || sum.Found != 1 || sum.Expired != 1 || sum.Objects != 1 {
		t.Fatalf("run: %+v %v", sum, err)
	}
	if !strings.Contains(logs.String(), `"msg":"expiry run"`) || !strings.Contains(logs.String(), `"expired":1`) {
		t.Fatalf("log %s", logs.String())
	}
	if a, err := e.Store.GetArtifact(ctx, "acme", "art_gone"); err != nil || a.State != domain.ArtifactExpired {
		t.Fatalf("art_gone: %+v %v", a, err)
	}
	if _, err := blobs.Head(ctx, blob.Key("acme", "art_gone")); err == nil {
		t.Fatal("the expired artifact's object is still there")
	}
	if _, err := blobs.Head(ctx, blob.Key("acme", "art_kept")); err != nil {
		t.Fatalf("the live artifact's object: %v", err)
	}
	// The same event again (EventBridge retries): nothing left to do.
	if sum, err = h(ctx, ev); err != nil || sum.Found != 0 {
		t.Fatalf("again: %+v %v", sum, err)
	}
}
