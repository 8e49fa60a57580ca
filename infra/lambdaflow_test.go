package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/infra/bundle"
	"github.com/envlease/envlease/infra/lambdatest"
	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/smoke"
)

// runSmokeAgainst registers a node agent through the API, as an operator
// does, and runs the operator's smoke check against the API at url.
func runSmokeAgainst(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	body, _ := json.Marshal(map[string]string{"pool": "local", "name": "lambda-test-node"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/nodes/credentials", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apitest.AliceToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var issued struct {
		Token string `json:"token"`
	}
	if res.StatusCode != http.StatusCreated || json.Unmarshal(raw, &issued) != nil || issued.Token == "" {
		t.Fatalf("issue a node credential: %d %s", res.StatusCode, raw)
	}
	// The node speaks HTTP: the WebSocket API is API Gateway's own, which
	// nothing here emulates; its function gets the sample events instead.
	a, err := agent.New(agent.Config{
		API: url, Token: issued.Token, Address: "127.0.0.1", Transport: agent.TransportHTTP,
		WorkDir: filepath.Join(t.TempDir(), "node"), Name: "lambda-test-node",
		Capacity: 4, Grace: 2 * time.Second, HTTP: &http.Client{}, Log: slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); _ = a.Run(actx) }()
	defer func() { stopAgent(); <-agentDone }()

	var log strings.Builder
	rep, err := smoke.Run(ctx, smoke.Config{URL: url, Token: apitest.AliceToken, Pool: "local", ReadyTimeout: 5 * time.Minute, Log: &log})
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ready in %s, %d events", rep.ReadyIn.Round(time.Millisecond), rep.Events)
}

// leastPrivilege compares, per function, the AWS actions its binary called
// during the whole test with those its role's policies grant.
func (ls *lambdaStack) leastPrivilege(t *testing.T) {
	var unused []string
	for _, g := range Groups {
		grants := ls.tmpl.Granted(ls.roles[g.Name])
		used := ls.rec.Used(g.Name)
		for _, a := range used {
			if !lambdatest.Allows(grants, a) {
				t.Errorf("function %s called %s (%d times), which its role does not grant: it would be denied on AWS", g.Name, a, ls.rec.Calls(g.Name, a))
			}
		}
		var idle []string
		for _, gr := range grants {
			for _, a := range gr.Actions {
				if !serviceRecorded(a) {
					continue
				}
				if !usedAny(used, a) && justifiedUnused[g.Name+" "+a] == "" && justifiedUnused["* "+a] == "" {
					idle = append(idle, a)
				}
			}
		}
		sort.Strings(idle)
		t.Logf("%-13s used: %s", g.Name, strings.Join(used, " "))
		for _, gr := range grants {
			for _, a := range gr.Actions {
				if why := cmp.Or(justifiedUnused[g.Name+" "+a], justifiedUnused["* "+a]); why != "" && !usedAny(used, a) {
					t.Logf("%-13s granted, not called here: %s (%s)", g.Name, a, why)
				}
			}
		}
		if len(idle) > 0 {
			unused = append(unused, g.Name+": "+strings.Join(idle, " "))
		}
	}
	// The link signer's key is a user of its own with one permission.
	for _, a := range ls.rec.Used("linksigner") {
		if !contains(linkSignerActions, a) {
			t.Errorf("a download link needs %s, which the link signer is not granted", a)
		}
	}
	if len(unused) > 0 {
		t.Errorf("granted but never used by the test, and not justified in justifiedUnused:\n  %s", strings.Join(unused, "\n  "))
	}
}

// usedAny reports whether a call in used is one the granted action allows.
func usedAny(used []string, granted string) bool {
	for _, u := range used {
		if lambdatest.Allows([]lambdatest.Grant{{Actions: []string{granted}}}, u) {
			return true
		}
	}
	return false
}

// serviceRecorded reports whether the test sees the action's calls: the
// services the functions call themselves. Logs, X-Ray and the stream's
// event source mapping act for the function outside its code.
func serviceRecorded(action string) bool {
	if contains(streamReadActions, action) || contains(streamListActions, action) {
		return false
	}
	for _, p := range []string{"dynamodb:", "s3:", "secretsmanager:", "execute-api:"} {
		if strings.HasPrefix(action, p) {
			return true
		}
	}
	return false
}

// justifiedUnused are the grants the test's runs do not call, each with
// why it stays ("<group> <action>"; "*" for every group that has it). The
// table grant is one per access level (groups.go), so the table actions are
// justified per level: a group that never needs one of them is a finding
// for the next narrowing, listed by the test's log of what each used.
var justifiedUnused = map[string]string{
	"* dynamodb:GetItem": "single-item reads (an environment, a node, a webhook, an idempotency record) " +
		"on paths this run does not take for every group; part of the read level every table group has",
	"* dynamodb:Query":        "listings and the due index: part of the read level every table group has",
	"* dynamodb:BatchGetItem": "authentication reads the key and its owner in one batch; the jobs read records of what they find due",
	"* dynamodb:ConditionCheckItem": "transactions that check an item they do not write: leasing into a sandbox, claims and heartbeats " +
		"(nodes, nodesws), held webhook deliveries (deliveries); part of the read level so a transaction never fails on a missing read grant",
	"* dynamodb:UpdateItem": "authentication's lastUsed (at most once a minute per key) and failed-attempt counter in every HTTP function " +
		"(confined to those items for the read level, and done only when a key's lastUsed is a minute old or an attempt fails); " +
		"the jobs' state changes when they find their kind of work due",
	"* dynamodb:PutItem":    "the jobs' writes when they find work due (stopping, failing, delivering, expiring); this run has none due",
	"* dynamodb:DeleteItem": "revoked connections, deleted webhooks, pruned records and the jobs' removals; part of the write level",
	"keys execute-api:ManageConnections": "revoking a node credential closes its node's WebSocket connections: " +
		"no node holds one here (the local stack has no WebSocket API)",
	"environments execute-api:ManageConnections": "a lease is offered to a connected node of its pool: " +
		"no node holds a WebSocket connection here",
	"timeouts execute-api:ManageConnections": "a timed-out environment a node runs is told to that node over its connection: " +
		"no node holds a WebSocket connection here",
	"artifacts s3:AbortMultipartUpload":     "an abandoned or mismatched upload is aborted",
	"artifacts s3:DeleteObject":             "an upload whose checksum does not match is deleted",
	"artifacts s3:ListMultipartUploadParts": "sealing an upload of more than one part reads its parts' checksums; the smoke artifact is one part",
	"* s3:ListBucket":                       "makes a missing object a 404 rather than a 403 (limited to orgs/ by its condition); expiry lists an artifact's folder",
	"nodes secretsmanager:GetSecretValue":   "a claim of an environment leased from a snapshot gets a link signed with the link signer's key",
	"nodesws secretsmanager:GetSecretValue": "as nodes: snapshot links in claims over the WebSocket",
	"expiry s3:AbortMultipartUpload":        "expiring an artifact aborts an upload left unfinished under it; nothing expires during the run",
	"expiry s3:DeleteObject":                "expiring an artifact deletes its objects; nothing expires during the run",
	"expiry s3:ListBucketMultipartUploads":  "finds the uploads left unfinished under an expiring artifact",
}

// jobs gives the scheduled functions work that falls due during the test: an
// environment with a hard timeout of seconds for timeouts, and an artifact
// that expires after the shortest allowed expiry for expiry. Each job is
// invoked by its schedule's event until it has done the work.
func (ls *lambdaStack) jobs(ctx context.Context, t *testing.T) {
	root, _ := bundle.FindRoot(".")
	scheduled := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(root, "events", "scheduled-"+name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	c, err := client.New(ls.api.URL, apitest.AliceToken)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("expiring "), 1000)
	art, err := c.Push(ctx, bytes.NewReader(data), int64(len(data)),
		client.ArtifactCreate{Name: "expiring.bin", Expires: "1m"}, client.PushOptions{})
	if err != nil {
		t.Fatalf("push an expiring artifact: %v", err)
	}
	leased, err := c.Lease(ctx, client.LeaseRequest{Template: "sleeper", Pool: "local", Hard: "2s"})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}

	poll := func(what string, limit time.Duration, job []byte, fn string, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !done() {
			if time.Now().After(deadline) {
				t.Errorf("%s: not done after %s of %s runs", what, limit, fn)
				return
			}
			time.Sleep(2 * time.Second)
			if _, err := ls.fns[fn].Invoke(ctx, job); err != nil {
				t.Errorf("%s: %v", fn, err)
				return
			}
		}
	}
	poll("stop the environment past its hard timeout", 3*time.Minute, scheduled("timeouts"), "timeouts", func() bool {
		env, err := c.GetEnvironment(ctx, leased.Environment.ID)
		return err == nil && env.State != domain.StatePending && env.State != domain.StateStarting && env.State != domain.StateReady
	})
	poll("remove the expired artifact's objects", 4*time.Minute, scheduled("expiry"), "expiry", func() bool {
		return ls.rec.Calls("expiry", "s3:DeleteObject") > 0
	})
	t.Logf("artifact %s expired and its objects deleted; environment %s stopped by its hard timeout", art.ID, leased.Environment.ID)
}
