package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/store"
)

// startDevserver runs the whole local stack as `go run ./scripts/devserver`
// does, on a free port, and stops it when the test ends.
func startDevserver(t *testing.T) string {
	t.Helper()
	return startDevserverWith(t, nil)
}

// startDevserverWith is startDevserver with its options tuned by tune.
func startDevserverWith(t *testing.T, tune func(*options)) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var out bytes.Buffer
	var dyn *devstack.Dynamo
	if !externalEndpoints() {
		dyn = devstack.NewTestDynamo(t)
	}
	o := options{addr: "127.0.0.1:0", sweep: time.Second, out: &out, ready: func(u string) { ready <- u },
		// The DynamoDB of this pass: minidyn, then DynamoDB Local.
		testDynamo: dyn,
		// Every answer the stack gives, to the test and to its node agent,
		// is checked against the API description.
		wrap: func(h http.Handler) http.Handler { return apitest.CheckedHandler(t, h) }}
	if tune != nil {
		tune(&o)
	}
	go func() { done <- run(ctx, o, apitest.DiscardLogger()) }()
	var base string
	select {
	case base = <-ready:
	case err := <-done:
		t.Fatalf("devserver stopped: %v", err)
	case <-time.After(5 * time.Minute):
		t.Fatal("devserver did not start")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("devserver shutdown: %v", err)
			}
		case <-time.After(time.Minute): // its graces alone (environments, HTTP, S3) add up to 12 s
			t.Error("devserver did not stop")
		}
	})
	if !strings.Contains(out.String(), "els_dev_alice_") || !strings.Contains(out.String(), base) {
		t.Errorf("banner lacks the URL or demo tokens:\n%s", out.String())
	}
	return base
}

func TestDevserverServesTheDemo(t *testing.T) {
	base := startDevserver(t)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/tokens", strings.NewReader(`{"name":"laptop"}`))
	req.Header.Set("Authorization", "Bearer "+apitest.AliceToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 201 || out.Token == "" {
		t.Fatalf("create token: %d %v", res.StatusCode, err)
	}
}

// The S3 gateway the devserver starts is gone once it stops.
func TestDevserverStopsWhatItStarted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan string, 1)
	var out bytes.Buffer
	go func() {
		done <- run(ctx, options{addr: "127.0.0.1:0", sweep: time.Second, out: &out, ready: func(u string) { ready <- u }}, apitest.DiscardLogger())
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("devserver stopped: %v", err)
	}
	s3 := between(out.String(), "S3 (versitygw):", "bucket")
	if s3 == "" {
		t.Fatalf("no S3 endpoint in banner:\n%s", out.String())
	}
	if _, err := http.Get(s3); err != nil {
		t.Fatalf("S3 not answering while running: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(s3); err == nil {
		t.Fatalf("S3 at %s still answers after the devserver stopped", s3)
	}
}

func between(s, start, end string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	s = s[i+len(start):]
	if j := strings.Index(s, end); j >= 0 {
		s = s[:j]
	}
	return strings.TrimSpace(s)
}

// With the SDK's endpoint settings pointing elsewhere (LocalStack, say), the
// devserver starts no DynamoDB or S3 of its own and serves from those.
func TestDevserverUsesEndpointSettings(t *testing.T) {
	dyn := devstack.NewTestDynamo(t)
	// One set of credentials reaches both, as AWS_ACCESS_KEY_ID does:
	// versitygw takes the DynamoDB's access key as its own.
	s3s, err := devstack.StartS3(t.Context(), devstack.S3Options{AccessKey: dyn.AccessKey, Bucket: devstack.TestBucket, Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s3s.Stop)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", dyn.Endpoint)
	t.Setenv("AWS_ENDPOINT_URL_S3", s3s.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", s3s.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3s.SecretKey)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("TABLE_NAME", "envlease-external")
	t.Setenv("BUCKET_NAME", "envlease-external")

	base := startDevserver(t)
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/templates", nil)
	req.Header.Set("Authorization", "Bearer "+apitest.AliceToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("templates: %v %v", res, err)
	}
	res.Body.Close()
	// The fixture landed in the external table, and the bucket exists there.
	ctx := context.Background()
	ts, err := store.New(dyn.Client(ctx), "envlease-external").ListTemplates(ctx, "acme")
	if err != nil || len(ts) == 0 {
		t.Fatalf("templates in the external table: %d %v", len(ts), err)
	}
	if _, err := s3s.Client(ctx).HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("envlease-external")}); err != nil {
		t.Fatalf("bucket: %v", err)
	}
}
