package devstack

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/truora/minidyn/server"

	"github.com/envlease/envlease/shared/store"
)

func TestDynamoPutGet(t *testing.T) {
	t.Parallel()
	d := NewTestDynamo(t)
	ctx := t.Context()
	db := d.Client(ctx)

	desc, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(TestTable)})
	if err != nil {
		t.Fatalf("describe table: %v", err)
	}
	if got := len(desc.Table.GlobalSecondaryIndexes); got != len(store.Schema.Indexes) {
		t.Errorf("table has %d GSIs, schema defines %d", got, len(store.Schema.Indexes))
	}

	item := map[string]ddbtypes.AttributeValue{
		store.AttrPK: &ddbtypes.AttributeValueMemberS{Value: "ORG#acme"},
		store.AttrSK: &ddbtypes.AttributeValueMemberS{Value: "USER#alice"},
		"role":       &ddbtypes.AttributeValueMemberS{Value: "admin"},
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(TestTable), Item: item}); err != nil {
		t.Fatalf("put item: %v", err)
	}
	got, err := db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(TestTable),
		Key: map[string]ddbtypes.AttributeValue{
			store.AttrPK: item[store.AttrPK],
			store.AttrSK: item[store.AttrSK],
		},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("get item: %v", err)
	}
	role, ok := got.Item["role"].(*ddbtypes.AttributeValueMemberS)
	if !ok || role.Value != "admin" {
		t.Fatalf("get item returned %#v, want role=admin", got.Item)
	}

	// Failure injection goes through the exposed server; one attempt so the
	// SDK's retries do not hide or slow the failure.
	d.Server.EmulateFailure(server.FailureConditionInternalServerError)
	_, err = db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(TestTable), Item: item},
		func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	if err == nil {
		t.Fatal("put item succeeded while failure was emulated")
	}
	d.Server.EmulateFailure(server.FailureConditionNone)
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(TestTable), Item: item}); err != nil {
		t.Fatalf("put item after clearing failure: %v", err)
	}
}

func TestDynamoEnsureTableIdempotent(t *testing.T) {
	t.Parallel()
	d := NewTestDynamo(t)
	ctx := t.Context()
	if err := store.EnsureTable(ctx, d.Client(ctx), TestTable); err != nil {
		t.Fatalf("second EnsureTable: %v", err)
	}
}

func TestS3PutGet(t *testing.T) {
	t.Parallel()
	s := NewTestS3(t)
	ctx := t.Context()
	c := s.Client(ctx)
	body := []byte("hello, envlease")
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("org/acme/a.txt"), Body: bytes.NewReader(body),
	}); err != nil {
		t.Fatalf("put object: %v", err)
	}
	if got := getObject(t, c, s.Bucket, "org/acme/a.txt"); !bytes.Equal(got, body) {
		t.Fatalf("get object = %q, want %q", got, body)
	}
}

// The gateway checks SigV4: a client with the wrong secret is refused.
func TestS3RejectsWrongSecret(t *testing.T) {
	t.Parallel()
	s := NewTestS3(t)
	ctx := t.Context()
	bad := &S3{Endpoint: s.Endpoint, AccessKey: s.AccessKey, SecretKey: "not-the-secret"}
	_, err := bad.Client(ctx).HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.Bucket)})
	if err == nil {
		t.Fatal("head bucket with a wrong secret succeeded")
	}
}

func TestS3PresignedGet(t *testing.T) {
	t.Parallel()
	s := NewTestS3(t)
	ctx := t.Context()
	c := s.Client(ctx)
	body := []byte("presigned bytes")
	putObject(t, c, s.Bucket, "p.bin", body)

	req, err := s3.NewPresignClient(c).PresignGetObject(ctx,
		&s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("p.bin")},
		s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatalf("presign get: %v", err)
	}
	status, got := httpDo(t, http.MethodGet, req.URL, nil, nil)
	if status != http.StatusOK || !bytes.Equal(got, body) {
		t.Fatalf("GET presigned URL = %d %q, want 200 %q", status, got, body)
	}

	// A tampered signature is refused, so the gateway really checks it.
	tampered := strings.Replace(req.URL, "X-Amz-Signature=", "X-Amz-Signature=0", 1)
	if status, _ := httpDo(t, http.MethodGet, tampered, nil, nil); status != http.StatusForbidden {
		t.Errorf("GET with tampered signature = %d, want 403", status)
	}
}

func TestS3PresignedGetExpires(t *testing.T) {
	t.Parallel()
	s := NewTestS3(t)
	ctx := t.Context()
	c := s.Client(ctx)
	putObject(t, c, s.Bucket, "e.bin", []byte("x"))
	req, err := s3.NewPresignClient(c).PresignGetObject(ctx,
		&s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("e.bin")},
		s3.WithPresignExpires(time.Second))
	if err != nil {
		t.Fatalf("presign get: %v", err)
	}
	time.Sleep(2500 * time.Millisecond)
	if status, body := httpDo(t, http.MethodGet, req.URL, nil, nil); status != http.StatusForbidden {
		t.Fatalf("GET expired presigned URL = %d %s, want 403", status, body)
	}
}

func TestS3StopLeavesNoProcess(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), testStartTimeout)
	defer cancel()
	s, err := StartS3(ctx, S3Options{Bucket: TestBucket, Progress: os.Stderr})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	pid := s.cmd.Process.Pid
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("gateway pid %d not running before Stop: %v", pid, err)
	}
	if runtime.GOOS == "linux" {
		checkListensOnlyOn(t, pid, strings.TrimPrefix(s.Endpoint, "http://"))
	}
	s.Stop()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("signal 0 to pid %d after Stop = %v, want ESRCH", pid, err)
	}
	if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("signal 0 to process group %d after Stop = %v, want ESRCH", pid, err)
	}
	if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary data dir %s still there after Stop (stat: %v)", s.Dir, err)
	}
	s.Stop() // idempotent
}

// helperEnv marks the re-executed test binary that plays a parent which dies
// without calling Stop; its value is the data dir the helper should use.
const helperEnv = "DEVSTACK_TEST_DYING_PARENT"

// TestS3ChildDiesWithParent starts a gateway from a child copy of this test
// binary, SIGKILLs that copy, and checks the gateway goes too (Pdeathsig).
func TestS3ChildDiesWithParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("parent-death signal is Linux only")
	}
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestDyingParentHelper$", "-test.v")
	// The helper dies without cleaning up, so its data dir lives in ours.
	cmd.Env = append(os.Environ(), helperEnv+"="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	var gwPID int
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "gateway-pid %d", &gwPID); err == nil {
			break
		}
	}
	if gwPID == 0 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper did not report a gateway pid")
	}
	if err := syscall.Kill(gwPID, 0); err != nil {
		t.Fatalf("gateway %d not running while its parent lives: %v", gwPID, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for processAlive(gwPID) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(gwPID, syscall.SIGKILL)
			t.Fatalf("gateway %d still running 5s after its parent was killed", gwPID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDyingParentHelper is the body of the helper process; it does nothing
// in a normal run.
func TestDyingParentHelper(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		return
	}
	s, err := StartS3(context.Background(), S3Options{Dir: os.Getenv(helperEnv)})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	fmt.Printf("gateway-pid %d\n", s.cmd.Process.Pid)
	select {} // wait to be killed
}

// processAlive reports whether pid exists and is not a zombie waiting for
// whoever inherited it to reap it.
func processAlive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	if i := bytes.LastIndexByte(data, ')'); i >= 0 && i+2 < len(data) {
		return data[i+2] != 'Z'
	}
	return true
}

func TestS3KeepsGivenDirAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), testStartTimeout)
	defer cancel()
	opts := S3Options{Dir: dir, Bucket: "keep", AccessKey: "devkey", SecretKey: "devsecret", Progress: os.Stderr}
	s, err := StartS3(ctx, opts)
	if err != nil {
		t.Fatalf("first start: %v", err)
	}
	putObject(t, s.Client(ctx), s.Bucket, "k", []byte("kept"))
	s.Stop()
	if _, err := os.Stat(filepath.Join(dir, "keep", "k")); err != nil {
		t.Fatalf("object file gone after Stop with a given Dir: %v", err)
	}
	s, err = StartS3(ctx, opts)
	if err != nil {
		t.Fatalf("second start on the same dir: %v", err)
	}
	defer s.Stop()
	if got := getObject(t, s.Client(ctx), s.Bucket, "k"); string(got) != "kept" {
		t.Fatalf("after restart got %q, want %q", got, "kept")
	}
}

func TestStartS3RejectsNonLoopbackAddr(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{":9000", "0.0.0.0:9000", "localhost:9000", "192.0.2.1:9000"} {
		if err := checkLoopback(addr); err == nil {
			t.Errorf("checkLoopback(%q) accepted a non-loopback address", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:9000", "[::1]:9000"} {
		if err := checkLoopback(addr); err != nil {
			t.Errorf("checkLoopback(%q) = %v", addr, err)
		}
	}
}

// --- checksum facts the artifact upload design depends on ---

func TestS3PutObjectChecksumSHA256(t *testing.T) {
	t.Parallel()
	s := NewTestS3(t)
	ctx := t.Context()
	c := s.Client(ctx)
	body := []byte("artifact payload")
	want := b64sha256(body)

	// The SDK computes the checksum and sends it.
	out, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("sdk"), Body: bytes.NewReader(body),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
	})
	if err != nil {
		t.Fatalf("put with ChecksumAlgorithm SHA256: %v", err)
	}
	if aws.ToString(out.ChecksumSHA256) != want {
		t.Errorf("put returned ChecksumSHA256 %q, want %q", aws.ToString(out.ChecksumSHA256), want)
	}
	checkStoredSHA256(t, c, s.Bucket, "sdk", want, body)

	// The caller states the checksum (as a client of a presigned URL would).
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("stated"), Body: bytes.NewReader(body),
		ChecksumSHA256: aws.String(want),
	}); err != nil {
		t.Fatalf("put with stated ChecksumSHA256: %v", err)
	}
	checkStoredSHA256(t, c, s.Bucket, "stated", want, body)

	// A stated checksum that does not match the body is refused and nothing
	// is stored.
	_, err = c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("wrong"), Body: bytes.NewReader(body),
		ChecksumSHA256: aws.String(b64sha256([]byte("something else"))),
	})
	if err == nil {
		t.Fatal("put with a wrong ChecksumSHA256 succeeded")
	}
	t.Logf("wrong checksum refused with: %s", apiCode(err))
	if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("wrong")}); err == nil {
		t.Fatal("object stored despite a wrong checksum")
	}
}

const partSize = 5 << 20 // S3's minimum for every part but the last

func TestS3MultipartChecksumSHA256(t *testing.T) {
	t.Parallel()
	s := NewTestS3(t)
	ctx := t.Context()
	c := s.Client(ctx)
	parts := [][]byte{bytes.Repeat([]byte("a"), partSize), []byte("tail part")}

	mpu, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("mp"), ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
	})
	if err != nil {
		t.Fatalf("create multipart upload: %v", err)
	}
	t.Logf("CreateMultipartUpload: ChecksumAlgorithm=%q ChecksumType=%q", mpu.ChecksumAlgorithm, mpu.ChecksumType)

	// A part whose stated checksum does not match is refused.
	_, err = c.UploadPart(ctx, &s3.UploadPartInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("mp"), UploadId: mpu.UploadId, PartNumber: aws.Int32(1),
		Body: bytes.NewReader(parts[0]), ChecksumSHA256: aws.String(b64sha256([]byte("nope"))),
	})
	if err == nil {
		t.Fatal("upload part with a wrong ChecksumSHA256 succeeded")
	}
	t.Logf("wrong part checksum refused with: %s", apiCode(err))

	var completed []types.CompletedPart
	for i, p := range parts {
		out, err := c.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(s.Bucket), Key: aws.String("mp"), UploadId: mpu.UploadId, PartNumber: aws.Int32(int32(i + 1)),
			Body: bytes.NewReader(p), ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
		})
		if err != nil {
			t.Fatalf("upload part %d: %v", i+1, err)
		}
		if aws.ToString(out.ChecksumSHA256) != b64sha256(p) {
			t.Errorf("part %d ChecksumSHA256 = %q, want %q", i+1, aws.ToString(out.ChecksumSHA256), b64sha256(p))
		}
		completed = append(completed, types.CompletedPart{
			ETag: out.ETag, PartNumber: aws.Int32(int32(i + 1)), ChecksumSHA256: out.ChecksumSHA256,
		})
	}
	// Complete checks a stated whole-object (composite) checksum too.
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("mp"), UploadId: mpu.UploadId,
		ChecksumSHA256:  aws.String(b64sha256([]byte("other")) + "-2"),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: completed},
	}); err == nil {
		t.Fatal("complete with a wrong composite ChecksumSHA256 succeeded")
	} else {
		t.Logf("wrong composite checksum refused with: %s", apiCode(err))
	}
	done, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("mp"), UploadId: mpu.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: completed},
	})
	if err != nil {
		t.Fatalf("complete multipart upload: %v", err)
	}
	want := compositeSHA256(parts)
	t.Logf("CompleteMultipartUpload: ChecksumSHA256=%q ChecksumType=%q", aws.ToString(done.ChecksumSHA256), done.ChecksumType)
	if aws.ToString(done.ChecksumSHA256) != want {
		t.Errorf("complete returned ChecksumSHA256 %q, want composite %q", aws.ToString(done.ChecksumSHA256), want)
	}
	checkStoredSHA256(t, c, s.Bucket, "mp", want, bytes.Join(parts, nil))
}

func TestS3PresignedPutObjectChecksum(t *testing.T) {
	t.Parallel()
	s := NewTestS3(t)
	ctx := t.Context()
	c := s.Client(ctx)
	body := []byte("uploaded through a presigned URL")
	sum := b64sha256(body)

	req, err := s3.NewPresignClient(c).PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("pp"), ChecksumSHA256: aws.String(sum),
	}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatalf("presign put: %v", err)
	}
	t.Logf("presigned PutObject signs headers %v", headerNames(req.SignedHeader))

	// Without the signed checksum header the request does not match its
	// signature.
	if status, out := httpDo(t, http.MethodPut, req.URL, nil, body); status == http.StatusOK {
		t.Errorf("PUT without the signed checksum header = 200, want refusal (%s)", out)
	}
	// With the wrong body for the signed checksum the store refuses it.
	if status, out := httpDo(t, http.MethodPut, req.URL, req.SignedHeader, []byte("tampered")); status == http.StatusOK {
		t.Errorf("PUT with a body not matching the signed checksum = 200, want refusal (%s)", out)
	} else {
		t.Logf("presigned PUT with wrong body refused with: %d %s", status, s3Code(out))
	}
	if status, out := httpDo(t, http.MethodPut, req.URL, req.SignedHeader, body); status != http.StatusOK {
		t.Fatalf("PUT presigned URL with checksum header = %d %s", status, out)
	}
	checkStoredSHA256(t, c, s.Bucket, "pp", sum, body)

	// A URL presigned without a checksum takes a plain PUT, but a checksum
	// header the uploader adds on its own is refused as unsigned: the
	// checksum has to be fixed when the URL is signed.
	plain, err := s3.NewPresignClient(c).PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("plain"),
	}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatalf("presign put without checksum: %v", err)
	}
	unsigned := http.Header{"X-Amz-Checksum-Sha256": {sum}}
	if status, out := httpDo(t, http.MethodPut, plain.URL, unsigned, body); status != http.StatusForbidden {
		t.Errorf("PUT with an unsigned checksum header = %d %s, want 403", status, s3Code(out))
	}
	if status, out := httpDo(t, http.MethodPut, plain.URL, nil, body); status != http.StatusOK {
		t.Fatalf("plain PUT to a URL presigned without checksum = %d %s", status, out)
	}
	if got := getObject(t, c, s.Bucket, "plain"); !bytes.Equal(got, body) {
		t.Fatalf("object uploaded by plain PUT = %q, want %q", got, body)
	}
}

func TestS3PresignedUploadPartChecksum(t *testing.T) {
	t.Parallel()
	s := NewTestS3(t)
	ctx := t.Context()
	c := s.Client(ctx)
	presign := s3.NewPresignClient(c)
	parts := [][]byte{bytes.Repeat([]byte("b"), partSize), []byte("last")}

	mpu, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("pmp"), ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
	})
	if err != nil {
		t.Fatalf("create multipart upload: %v", err)
	}
	var completed []types.CompletedPart
	for i, p := range parts {
		n := int32(i + 1)
		req, err := presign.PresignUploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(s.Bucket), Key: aws.String("pmp"), UploadId: mpu.UploadId, PartNumber: aws.Int32(n),
			ChecksumSHA256: aws.String(b64sha256(p)),
		}, s3.WithPresignExpires(time.Minute))
		if err != nil {
			t.Fatalf("presign upload part %d: %v", n, err)
		}
		if i == 0 {
			t.Logf("presigned UploadPart signs headers %v", headerNames(req.SignedHeader))
			// In an upload created with SHA256, a part URL presigned
			// without a checksum is refused by the store.
			bare, err := presign.PresignUploadPart(ctx, &s3.UploadPartInput{
				Bucket: aws.String(s.Bucket), Key: aws.String("pmp"), UploadId: mpu.UploadId, PartNumber: aws.Int32(n),
			}, s3.WithPresignExpires(time.Minute))
			if err != nil {
				t.Fatalf("presign upload part without checksum: %v", err)
			}
			// A small body: the gateway answers before reading it, and with
			// a large one it would reset the connection mid-write.
			if status, out := httpDo(t, http.MethodPut, bare.URL, nil, []byte("x")); status == http.StatusOK {
				t.Errorf("part PUT without checksum in a SHA256 upload = 200, want refusal (%s)", out)
			} else {
				t.Logf("part PUT without checksum in a SHA256 upload refused with: %d %s", status, s3Code(out))
			}
			if status, out := httpDo(t, http.MethodPut, req.URL, req.SignedHeader, bytes.Repeat([]byte("c"), partSize)); status == http.StatusOK {
				t.Errorf("presigned part PUT with a body not matching its checksum = 200, want refusal (%s)", out)
			}
		}
		resp := httpDoResp(t, http.MethodPut, req.URL, req.SignedHeader, p)
		if resp.status != http.StatusOK {
			t.Fatalf("PUT presigned part %d = %d %s", n, resp.status, resp.body)
		}
		if got := resp.header.Get("x-amz-checksum-sha256"); got != b64sha256(p) {
			t.Errorf("part %d response x-amz-checksum-sha256 = %q, want %q", n, got, b64sha256(p))
		}
		completed = append(completed, types.CompletedPart{
			ETag: aws.String(resp.header.Get("ETag")), PartNumber: aws.Int32(n), ChecksumSHA256: aws.String(b64sha256(p)),
		})
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("pmp"), UploadId: mpu.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: completed},
	}); err != nil {
		t.Fatalf("complete multipart upload: %v", err)
	}
	checkStoredSHA256(t, c, s.Bucket, "pmp", compositeSHA256(parts), bytes.Join(parts, nil))
}

// --- helpers ---

func putObject(t *testing.T, c *s3.Client, bucket, key string, body []byte) {
	t.Helper()
	if _, err := c.PutObject(t.Context(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body),
	}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func getObject(t *testing.T, c *s3.Client, bucket, key string) []byte {
	t.Helper()
	out, err := c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

// checkStoredSHA256 asserts that HeadObject and GetObject with ChecksumMode
// enabled report want, and that the bytes are body.
func checkStoredSHA256(t *testing.T, c *s3.Client, bucket, key, want string, body []byte) {
	t.Helper()
	ctx := t.Context()
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil {
		t.Fatalf("head %s: %v", key, err)
	}
	if got := aws.ToString(head.ChecksumSHA256); got != want {
		t.Errorf("HeadObject %s ChecksumSHA256 = %q (type %q), want %q", key, got, head.ChecksumType, want)
	}
	if got := aws.ToInt64(head.ContentLength); got != int64(len(body)) {
		t.Errorf("HeadObject %s ContentLength = %d, want %d", key, got, len(body))
	}
	get, err := c.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer get.Body.Close()
	got, err := io.ReadAll(get.Body)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	if g := aws.ToString(get.ChecksumSHA256); g != want {
		t.Errorf("GetObject %s ChecksumSHA256 = %q, want %q", key, g, want)
	}
	if !bytes.Equal(got, body) {
		t.Errorf("GetObject %s returned %d bytes that differ from the %d uploaded", key, len(got), len(body))
	}
}

func b64sha256(b []byte) string {
	sum := sha256.Sum256(b)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// compositeSHA256 is S3's checksum of a multipart object with COMPOSITE
// checksums: the SHA-256 of the concatenated binary part checksums, then
// "-" and the part count.
func compositeSHA256(parts [][]byte) string {
	h := sha256.New()
	for _, p := range parts {
		sum := sha256.Sum256(p)
		h.Write(sum[:])
	}
	return base64.StdEncoding.EncodeToString(h.Sum(nil)) + "-" + strconv.Itoa(len(parts))
}

type httpResult struct {
	status int
	header http.Header
	body   []byte
}

// httpDo sends a plain net/http request, as a browser or curl holding a
// presigned URL would, with the given headers (Host excluded: net/http sets it
// from the URL).
func httpDo(t *testing.T, method, url string, header http.Header, body []byte) (int, []byte) {
	t.Helper()
	r := httpDoResp(t, method, url, header, body)
	return r.status, r.body
}

func httpDoResp(t *testing.T, method, url string, header http.Header, body []byte) httpResult {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	for k, vs := range header {
		if strings.EqualFold(k, "Host") {
			continue
		}
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return httpResult{status: resp.StatusCode, header: resp.Header, body: b}
}

func headerNames(h http.Header) []string {
	var names []string
	for k := range h {
		names = append(names, k)
	}
	return names
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode() + ": " + ae.ErrorMessage()
	}
	return err.Error()
}

// s3Code extracts Code and Message from an S3 XML error body.
func s3Code(b []byte) string {
	var e struct{ Code, Message string }
	if err := xml.Unmarshal(b, &e); err != nil {
		return string(b)
	}
	return e.Code + ": " + e.Message
}

// checkListensOnlyOn asserts, from /proc, that the process pid has exactly one
// listening TCP socket, on addr, and no UDP sockets.
func checkListensOnlyOn(t *testing.T, pid int, addr string) {
	t.Helper()
	inodes := map[string]bool{}
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatalf("read %s: %v", fdDir, err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("split %s: %v", addr, err)
	}
	p, _ := strconv.Atoi(port)
	ip := net.ParseIP(host).To4()
	wantLocal := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], p)

	var listening []string
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, proto))
		if err != nil {
			t.Fatalf("read /proc/%d/net/%s: %v", pid, proto, err)
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] {
				continue
			}
			isUDP := strings.HasPrefix(proto, "udp")
			if isUDP || f[3] == "0A" { // 0A = TCP_LISTEN
				listening = append(listening, proto+" "+f[1])
			}
		}
	}
	if len(listening) != 1 || listening[0] != "tcp "+wantLocal {
		t.Fatalf("gateway sockets %v, want only tcp %s (%s)", listening, wantLocal, addr)
	}
}

// The gateway's credentials are in its environment, which only its own user
// and root can read, and not in its arguments, which every user can (ps).
func TestS3CredentialsNotOnCommandLine(t *testing.T) {
	t.Parallel()
	s := NewTestS3(t)
	pid := s.cmd.Process.Pid
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{s.SecretKey, s.AccessKey} {
		if bytes.Contains(cmdline, []byte(secret)) {
			t.Errorf("the gateway's command line holds a credential: %q", bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(environ, []byte("\x00ROOT_SECRET_ACCESS_KEY="+s.SecretKey+"\x00")) &&
		!bytes.HasPrefix(environ, []byte("ROOT_SECRET_ACCESS_KEY="+s.SecretKey+"\x00")) {
		t.Errorf("the gateway's environment lacks its secret")
	}
	if fi, err := os.Stat(fmt.Sprintf("/proc/%d/environ", pid)); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("/proc/%d/environ is readable by others: %v %v", pid, fi.Mode(), err)
	}
}
