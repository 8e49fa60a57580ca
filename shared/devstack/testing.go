package devstack

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestTable and TestBucket are the names the test helpers create.
const (
	TestTable  = "envlease-test"
	TestBucket = "envlease-test"
)

// testStartTimeout covers a first-run build of versitygw on a slow machine;
// later starts take well under a second.
const testStartTimeout = 5 * time.Minute

// NewTestDynamo starts minidyn with the table TestTable and closes it when the
// test ends.
func NewTestDynamo(t testing.TB) *Dynamo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	d, err := StartDynamo(ctx, TestTable)
	if err != nil {
		t.Fatalf("start local dynamodb: %v", err)
	}
	t.Cleanup(d.Close)
	return d
}

// NewTestS3 starts versitygw with the bucket TestBucket in a temporary
// directory and stops it when the test ends. If versitygw cannot be built or
// started the test fails with the reason; it never skips, because a skipped
// storage test looks like a passing one.
func NewTestS3(t testing.TB) *S3 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	s, err := StartS3(ctx, S3Options{
		Bucket: TestBucket,
		// The first build takes a while; say why the test is quiet. Stderr
		// rather than t.Log, which go test only shows on failure or -v.
		Progress: os.Stderr,
	})
	if err != nil {
		t.Fatalf("start local s3 (versitygw): %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}
