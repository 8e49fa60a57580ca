package lambdatest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

// fakeMode makes the test binary a runtime: run through aws-lambda-go's own
// runtime client, so the Runtime API is checked against the client every
// function uses.
const fakeMode = "LAMBDATEST_FAKE_RUNTIME"

func TestMain(m *testing.M) {
	switch os.Getenv(fakeMode) {
	case "":
		os.Exit(m.Run())
	case "echo":
		lambda.Start(func(ctx context.Context, in map[string]any) (map[string]any, error) {
			lc, _ := lambdacontext.FromContext(ctx)
			dl, _ := ctx.Deadline()
			if in["fail"] == true {
				return nil, errors.New("asked to fail")
			}
			return map[string]any{"in": in, "requestId": lc.AwsRequestID, "arn": lc.InvokedFunctionArn,
				"deadlineIn": time.Until(dl).Seconds(), "table": os.Getenv("TABLE_NAME"), "args": len(os.Args),
				"trace": os.Getenv("_X_AMZN_TRACE_ID")}, nil
		})
	case "exit":
		fmt.Fprintln(os.Stderr, "TABLE_NAME is not set")
		os.Exit(1)
	case "initerror":
		http.Post("http://"+os.Getenv("AWS_LAMBDA_RUNTIME_API")+runtimePrefix+"/init/error", "application/json",
			strings.NewReader(`{"errorType":"Runtime.ConfigError","errorMessage":"no table"}`))
		time.Sleep(time.Minute)
	}
}

// fakeFunction is the test binary as a function's bootstrap.
func fakeFunction(t *testing.T, name, mode string) *Function {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	boot := filepath.Join(dir, "bootstrap")
	if err := os.Symlink(exe, boot); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Handler: "bootstrap", Runtime: "provided.al2023", MemoryMB: 128, TimeoutS: 3}
	env := append(LambdaEnv(name, spec, "us-east-1", [3]string{"AKID", "SECRET", "TOKEN"}, dir), fakeMode+"="+mode, "TABLE_NAME=t")
	f := &Function{Name: name, Spec: spec, Bootstrap: boot, Env: env, ARN: "arn:aws:lambda:us-east-1:123456789012:function:" + name, Wait: time.Minute}
	t.Cleanup(f.Stop)
	return f
}

func TestRuntimeAPIWithLambdaClient(t *testing.T) {
	ctx := context.Background()
	f := fakeFunction(t, "echo", "echo")
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := f.Invoke(ctx, []byte(`{"hello":"world"}`))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		In         map[string]any
		RequestID  string
		ARN        string
		DeadlineIn float64
		Table      string
		Args       int
		Trace      string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if got.In["hello"] != "world" || len(got.RequestID) != 36 || got.ARN != f.ARN || got.Table != "t" {
		t.Errorf("answer %s", out)
	}
	if !strings.HasPrefix(got.Trace, "Root=1-") || !strings.Contains(got.Trace, ";Sampled=0") {
		t.Errorf("trace header as the runtime saw it: %q", got.Trace)
	}
	// The deadline header is the function's timeout from the invocation.
	if got.DeadlineIn <= 0 || got.DeadlineIn > 3 {
		t.Errorf("deadline %.1f s away, want within the 3 s timeout", got.DeadlineIn)
	}
	// Configuration and credentials reach the process only by its
	// environment: nothing is on its command line.
	if got.Args != 1 {
		t.Errorf("the runtime got %d arguments", got.Args-1)
	}
	// A function error comes back through .../error, and the environment
	// serves the next invocation.
	_, err = f.Invoke(ctx, []byte(`{"fail":true}`))
	var fe *FunctionError
	if !errors.As(err, &fe) || fe.Message != "asked to fail" || fe.Type != "errorString" {
		t.Fatalf("function error: %v", err)
	}
	if _, err := f.Invoke(ctx, []byte(`{}`)); err != nil {
		t.Fatalf("after an error: %v", err)
	}
	// Concurrent invocations get environments of their own.
	errs := make(chan error, 3)
	for range 3 {
		go func() { _, err := f.Invoke(ctx, []byte(`{}`)); errs <- err }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if f.Invocations() != 6 {
		t.Errorf("%d invocations counted", f.Invocations())
	}
}

func TestStartFailuresNameTheFunction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct{ mode, want string }{
		{"exit", "TABLE_NAME is not set"},
		{"initerror", "Runtime.ConfigError"},
	} {
		f := fakeFunction(t, "broken-"+tc.mode, tc.mode)
		err := f.Start(ctx)
		if err == nil || !strings.Contains(err.Error(), "broken-"+tc.mode) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.mode, err)
		}
	}
	f := fakeFunction(t, "nohandler", "echo")
	f.Spec.Runtime = "nodejs22.x"
	if err := f.Start(ctx); err == nil || !strings.Contains(err.Error(), "nohandler") {
		t.Errorf("not a provided runtime: %v", err)
	}
	f = fakeFunction(t, "nobinary", "echo")
	f.Bootstrap = filepath.Join(t.TempDir(), "bootstrap")
	if err := f.Start(ctx); err == nil || !strings.Contains(err.Error(), "nobinary") {
		t.Errorf("no bootstrap: %v", err)
	}
}

func TestRuntimeAPIRefusesUnknownRequestID(t *testing.T) {
	api, err := NewRuntimeAPI()
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	res, err := http.Post("http://"+api.Addr+runtimePrefix+"/invocation/nope/response", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("unknown request id: %d", res.StatusCode)
	}
}

func TestS3Actions(t *testing.T) {
	for _, tc := range []struct{ method, target, want string }{
		{"GET", "/b?list-type=2&prefix=orgs/", "s3:ListBucket"},
		{"GET", "/b?uploads", "s3:ListBucketMultipartUploads"},
		{"POST", "/b?delete", "s3:DeleteObject"},
		{"HEAD", "/b/orgs/a/x", "s3:GetObject"},
		{"GET", "/b/orgs/a/x?uploadId=1", "s3:ListMultipartUploadParts"},
		{"PUT", "/b/orgs/a/x?partNumber=1&uploadId=1", "s3:PutObject"},
		{"POST", "/b/orgs/a/x?uploads", "s3:PutObject"},
		{"DELETE", "/b/orgs/a/x?uploadId=1", "s3:AbortMultipartUpload"},
		{"DELETE", "/b/orgs/a/x", "s3:DeleteObject"},
	} {
		req, _ := http.NewRequest(tc.method, "http://127.0.0.1"+tc.target, nil)
		if got := s3Action(req); got != tc.want {
			t.Errorf("%s %s: %s, want %s", tc.method, tc.target, got, tc.want)
		}
	}
	got := dynamoActions("TransactWriteItems", []byte(`{"TransactItems":[{"Put":{}},{"ConditionCheck":{}},{"Update":{}}]}`))
	if strings.Join(got, " ") != "dynamodb:PutItem dynamodb:ConditionCheckItem dynamodb:UpdateItem" {
		t.Errorf("transaction: %v", got)
	}
}
