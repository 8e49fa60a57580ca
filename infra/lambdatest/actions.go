package lambdatest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// Recorder keeps the IAM actions each function's calls need. It sees the
// calls on the wire, so it counts what the binary really sends, whichever
// SDK client or middleware sent it.
type Recorder struct {
	mu   sync.Mutex
	used map[string]map[string]int // function -> action -> calls
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{used: map[string]map[string]int{}} }

func (r *Recorder) add(fn string, actions ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.used[fn] == nil {
		r.used[fn] = map[string]int{}
	}
	for _, a := range actions {
		r.used[fn][a]++
	}
}

// Used returns the actions fn called, sorted.
func (r *Recorder) Used(fn string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for a := range r.used[fn] {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// Calls returns how many calls of the action fn made.
func (r *Recorder) Calls(fn, action string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used[fn][action]
}

// DynamoProxy forwards to the DynamoDB at target and records each call's
// action as IAM authorizes it: a transaction is authorized per item action.
func (r *Recorder) DynamoProxy(fn, target string) *httptest.Server {
	return r.proxy(target, func(req *http.Request, body []byte) []string {
		op := strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
		return dynamoActions(op, body)
	}, fn)
}

func dynamoActions(op string, body []byte) []string {
	switch op {
	case "TransactWriteItems", "TransactGetItems":
		var in struct {
			TransactItems []map[string]json.RawMessage
		}
		json.Unmarshal(body, &in)
		names := map[string]string{
			"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
			"ConditionCheck": "ConditionCheckItem", "Get": "GetItem",
		}
		var out []string
		for _, it := range in.TransactItems {
			for k := range it {
				if n, ok := names[k]; ok {
					out = append(out, "dynamodb:"+n)
				}
			}
		}
		return out
	}
	return []string{"dynamodb:" + op}
}

// S3Proxy forwards to the S3 at target (path-style requests) and records
// each request's IAM action. linkSigner receives the presigned GETs: those
// are download links, signed with the link signer's key, not the role.
func (r *Recorder) S3Proxy(fn, linkSigner, target string) *httptest.Server {
	return r.proxy(target, func(req *http.Request, _ []byte) []string {
		q := req.URL.Query()
		if req.Method == http.MethodGet && q.Get("X-Amz-Signature") != "" && linkSigner != "" {
			r.add(linkSigner, s3Action(req))
			return nil
		}
		return []string{s3Action(req)}
	}, fn)
}

// s3Action names the IAM action of a path-style S3 request.
func s3Action(req *http.Request) string {
	q := req.URL.Query()
	p := strings.TrimPrefix(req.URL.Path, "/")
	bucketLevel := !strings.Contains(strings.TrimSuffix(p, "/"), "/")
	_, uploads := q["uploads"]
	_, del := q["delete"]
	switch {
	case bucketLevel && req.Method == http.MethodGet && uploads:
		return "s3:ListBucketMultipartUploads"
	case bucketLevel && req.Method == http.MethodPost && del:
		return "s3:DeleteObject"
	case bucketLevel && (req.Method == http.MethodGet || req.Method == http.MethodHead):
		return "s3:ListBucket"
	case bucketLevel:
		return "s3:" + req.Method + "Bucket"
	case req.Method == http.MethodGet && q.Has("uploadId"):
		return "s3:ListMultipartUploadParts"
	case req.Method == http.MethodGet || req.Method == http.MethodHead:
		return "s3:GetObject"
	case req.Method == http.MethodPut || req.Method == http.MethodPost:
		// PutObject, UploadPart, CreateMultipartUpload and
		// CompleteMultipartUpload are all authorized as s3:PutObject.
		return "s3:PutObject"
	case req.Method == http.MethodDelete && q.Has("uploadId"):
		return "s3:AbortMultipartUpload"
	case req.Method == http.MethodDelete:
		return "s3:DeleteObject"
	}
	return "s3:" + req.Method
}

// proxy forwards to target keeping the Host the client signed.
func (r *Recorder) proxy(target string, classify func(*http.Request, []byte) []string, fn string) *httptest.Server {
	u, err := url.Parse(target)
	if err != nil {
		panic(err)
	}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(u)
		pr.Out.Host = pr.In.Host
	}}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body []byte
		if req.Header.Get("X-Amz-Target") != "" {
			body, _ = io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		if a := classify(req, body); len(a) > 0 {
			r.add(fn, a...)
		}
		rp.ServeHTTP(w, req)
	}))
}

// SecretsManager serves GetSecretValue for every secret id with value and
// records the call.
func (r *Recorder) SecretsManager(fn, value string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		op := strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "secretsmanager.")
		r.add(fn, "secretsmanager:"+op)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		if op != "GetSecretValue" {
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"__type":"InvalidRequestException","message":"only GetSecretValue is served"}`))
			return
		}
		var in struct{ SecretId string }
		json.NewDecoder(req.Body).Decode(&in)
		json.NewEncoder(w).Encode(map[string]any{
			"ARN": in.SecretId, "Name": "link-signer", "SecretString": value,
			"VersionId": "00000000-0000-0000-0000-000000000001", "VersionStages": []string{"AWSCURRENT"},
		})
	}))
}

// Management serves the API Gateway Management API of a WebSocket stage
// that has no connections: every connection is gone (410), which is what a
// function sees after a node disconnected. Each call is recorded.
func (r *Recorder) Management(fn string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.add(fn, "execute-api:ManageConnections")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amzn-Errortype", "GoneException")
		w.WriteHeader(http.StatusGone)
		w.Write([]byte(`{"message":"Gone"}`))
	}))
}
