package devstack

import (
	"context"
	"fmt"
	"os"
	"sync"
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

// TestDynamoEnv chooses the DynamoDBs that RunTests runs a package's tests
// against: "both" (the default), "minidyn" or "dynamodb-local".
const TestDynamoEnv = "ENVLEASE_TEST_DYNAMO"

// testKind is the DynamoDB that NewTestDynamo gives the tests running now:
// minidyn unless RunTests is in its DynamoDB Local pass.
var testKind = KindMinidyn

// TestKind reports which DynamoDB NewTestDynamo gives the tests running now.
func TestKind() string { return testKind }

// RunTests is the TestMain of every package whose tests exercise the store:
// it runs the package's tests once against minidyn and once against DynamoDB
// Local (one JVM for the whole test process, a namespace of tables per test),
// or only against the one that ENVLEASE_TEST_DYNAMO names. It returns the exit
// code for os.Exit.
func RunTests(m *testing.M) int {
	kinds := []string{KindMinidyn, KindDynamoLocal}
	switch v := os.Getenv(TestDynamoEnv); v {
	case "", "both":
	case KindMinidyn, KindDynamoLocal:
		kinds = []string{v}
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: want both, %s or %s\n", TestDynamoEnv, v, KindMinidyn, KindDynamoLocal)
		return 2
	}
	code := 0
	for _, k := range kinds {
		testKind = k
		// Printed to the test binary's stdout: go test shows it only with -v
		// or when the package fails, which is when it tells which pass failed.
		fmt.Printf("=== DynamoDB: %s\n", k)
		if c := m.Run(); c != 0 {
			code = c
		}
	}
	testKind = KindMinidyn
	sharedLocal.stop()
	return code
}

// sharedLocal is the one DynamoDB Local process of a test process.
var sharedLocal localOnce

type localOnce struct {
	mu  sync.Mutex
	d   *DynamoLocal
	err error
}

func (l *localOnce) get(ctx context.Context) (*DynamoLocal, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.d == nil && l.err == nil {
		l.d, l.err = StartDynamoLocal(ctx, DynamoLocalOptions{Progress: os.Stderr})
	}
	return l.d, l.err
}

func (l *localOnce) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.d.Stop()
	l.d, l.err = nil, nil
}

// NewTestDynamo gives the test the table TestTable on the DynamoDB of the
// current pass (TestKind): a minidyn server of its own, or a namespace of the
// process's DynamoDB Local. It is closed when the test ends.
func NewTestDynamo(t testing.TB) *Dynamo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	var d *Dynamo
	var err error
	if testKind == KindDynamoLocal {
		var l *DynamoLocal
		if l, err = sharedLocal.get(ctx); err == nil {
			d, err = l.Namespace(ctx, TestTable)
		}
	} else {
		d, err = StartDynamo(ctx, TestTable)
	}
	if err != nil {
		t.Fatalf("start local dynamodb (%s): %v", testKind, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("(this test ran against %s)", d.Kind)
		}
		d.Close()
	})
	return d
}

// NeedsMinidyn skips the test in the DynamoDB Local pass: it drives minidyn's
// failure emulation, which DynamoDB Local does not have. It ran in the
// minidyn pass.
func NeedsMinidyn(t testing.TB) {
	t.Helper()
	if testKind != KindMinidyn {
		t.Skip("injects DynamoDB failures through minidyn; covered by the minidyn pass")
	}
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
