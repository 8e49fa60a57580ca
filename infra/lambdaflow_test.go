package main

import (
	"bytes"
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
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/smoke"
)

// runSmokeAgainst registers a node agent through the API, as an operator
// does, and runs the operator's smoke check against the API at url.
func runSmokeAgainst(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	token := issueNodeCredential(ctx, t, url, "lambda-test-node")
	// The node speaks HTTP: the WebSocket API is API Gateway's own, which
	// nothing here emulates; its function gets the sample events instead.
	a, err := agent.New(agent.Config{
		API: url, Token: token, Address: "127.0.0.1", Transport: agent.TransportHTTP,
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

// issueNodeCredential issues a node credential of pool local through the
// API, as an admin does.
func issueNodeCredential(ctx context.Context, t *testing.T, url, name string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"pool": "local", "name": name})
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
	return issued.Token
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
				if !usedAny(used, a) && whyUnused(g, a) == "" {
					idle = append(idle, a)
				}
			}
		}
		sort.Strings(idle)
		t.Logf("%-13s used: %s", g.Name, strings.Join(used, " "))
		for _, gr := range grants {
			for _, a := range gr.Actions {
				if why := whyUnused(g, a); why != "" && !usedAny(used, a) {
					t.Logf("%-13s granted, not called here: %s (%s)", g.Name, a, why)
				}
			}
		}
		if len(idle) > 0 {
			unused = append(unused, g.Name+": "+strings.Join(idle, " "))
		}
	}
	// An entry for a grant the function no longer has would hide nothing
	// but mislead: it goes with the grant.
	for k := range justifiedUnused {
		name, a, _ := strings.Cut(k, " ")
		granted := false
		for _, gr := range ls.tmpl.Granted(ls.roles[name]) {
			granted = granted || contains(gr.Actions, a)
		}
		if !granted {
			t.Errorf("justifiedUnused has %q, which function %s is not granted", k, name)
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
	for _, p := range []string{"dynamodb:", "s3:", "secretsmanager:", "execute-api:", "kms:"} {
		if strings.HasPrefix(action, p) {
			return true
		}
	}
	return false
}

// justifiedUnused are the grants the test's runs do not call, each with the
// code path that needs it ("<group> <action>"). Before an entry is added,
// the test should reach the path; an entry is for a path it cannot reach
// cheaply. Authentication's own writes are justified once, in authUnused.
var justifiedUnused = map[string]string{
	"identity kms:Sign": "a node's fetch of the tokens of an environment with an identity that it runs " +
		"(POST /v1/nodes/{id}/environments/{env}/identity); the run's templates have no identity " +
		"(shared/identity's TestKMSSigner signs through the SDK against a KMS stand-in)",
	"secrets kms:GenerateDataKey": "setting a secret seals it with a fresh data key (secrets.KMSKeys); the run sets none " +
		"(shared/secrets' seal test makes data keys through the SDK against a KMS stand-in)",
	"nodes kms:Decrypt": "a node's fetch of the secrets its environment's template binds opens their data keys " +
		"(GET /v1/nodes/{id}/environments/{env}/secrets); the run's templates bind none",
	"secrets dynamodb:PutItem": "setting a secret writes its sealed item and its event in one transaction (store.PutSecret); " +
		"setting one needs KMS, which the run has not: its sample request is a GET of the list",
	"secrets dynamodb:DeleteItem": "deleting a secret (store.DeleteSecret, a transaction with its event); the run deletes none",
	"secrets dynamodb:GetItem":    "GET /v1/secrets/{name} reads one secret (store.GetSecret); the sample request lists them",
	"usage dynamodb:PutItem": "an admin's PUT of the usage settings (store.PutUsageSettings) or of a budget " +
		"(store.PutBudgets, a transaction of puts); the sample request is a GET of the usage",
	"timeouts dynamodb:ConditionCheckItem": "the budget run drops an organization left without budgets only while " +
		"it still has none (store.DropBudgetOrg); the run's table has no budgets",
	"nodes dynamodb:DeleteItem": "a report that stops an environment leased into a sandbox frees its listen ports " +
		"(store.stopItems deletes the port items); the environments nodes stop in the run are in no sandbox",
	"nodesws dynamodb:GetItem": "a claim or report over the socket reads its environment and node " +
		"(store.GetEnvironment, GetNode); the sample message is a hello",
	"nodesws dynamodb:UpdateItem": "heartbeats over the socket (store.BeatNode), a connection's full flag " +
		"(SetConnectionFull) and the authorizer's authentication writes; the sample message is a hello",
	"timeouts dynamodb:GetItem": "a stop refused because a touch or a node's report came between the listing and " +
		"the stop reads the environment again (store.StopEnvironment)",
	"timeouts dynamodb:DeleteItem": "stopping an environment leased into a sandbox frees its listen ports " +
		"(store.stopItems); the environment it stops in the run is in no sandbox",
	"lostnodes dynamodb:DeleteItem": "failing a lost node's environment leased into a sandbox frees its listen ports " +
		"(store.stopItems); the lost node of the run holds none",
	"deliveries dynamodb:ConditionCheckItem": "holding a delivery of a disabled webhook checks the webhook is still " +
		"disabled (store.SaveDelivery, heldCheck); the run disables none",
	"deliveries dynamodb:UpdateItem": "the attempt that reaches the failure limit disables its webhook in the same " +
		"transaction (store.SaveDelivery); the run's receivers do not fail that often",
	"expiry dynamodb:UpdateItem": "an artifact whose upload window ended unsealed is failed before its objects go " +
		"(store.AbandonArtifact); the run's expiring artifact was sealed",
	"timeouts execute-api:ManageConnections": "a timed-out environment a node runs is told to that node over its " +
		"connection (nodes.Stopper): the environment the run times out runs on a node without a WebSocket connection",
	"tokens dynamodb:Query": "trusted issuers are listed, and a CI token exchange reads the organization's issuers " +
		"(store.ListIssuers); the run registers none",
	"artifacts s3:AbortMultipartUpload":     "an abandoned or mismatched upload is aborted",
	"artifacts s3:DeleteObject":             "an upload whose checksum does not match is deleted",
	"artifacts s3:ListMultipartUploadParts": "sealing an upload of more than one part reads its parts' checksums; the smoke artifact is one part",
	"artifacts s3:ListBucket":               "makes a missing object a 404 rather than a 403 (limited to orgs/ by its condition)",
	"nodes secretsmanager:GetSecretValue":   "a claim of an environment leased from a snapshot gets a link signed with the link signer's key",
	"nodesws secretsmanager:GetSecretValue": "as nodes: snapshot links in claims over the WebSocket",
	"nodes s3:PutObject":                    "kept logs and checkpoints a node packed are uploaded through URLs presigned here over HTTP (nodes.KeepLog, nodes.CheckpointUpload); the run keeps neither",
	"nodes s3:GetObject":                    "sealing a kept log or a checkpoint heads its object (nodes.CompleteLog, nodes.CheckpointDone, artifacts.Complete); the run keeps neither",
	"nodes s3:DeleteObject":                 "sealing a kept log or checkpoint whose bytes do not match deletes them (artifacts.Complete); the run keeps neither",
	"nodes s3:AbortMultipartUpload":         "a mismatched multipart checkpoint upload is aborted; the run takes no checkpoint",
	"nodes s3:ListMultipartUploadParts":     "sealing a checkpoint of more than one part reads its parts' checksums; the run takes no checkpoint",
	"nodes s3:ListBucket":                   "makes a kept log's or checkpoint's missing object a 404 rather than a 403 when it is sealed (limited to orgs/ by its condition)",
	"nodesws s3:PutObject":                  "a checkpoint a node packed is uploaded through URLs presigned here, over the WebSocket (nodes.CheckpointUpload); the run takes no checkpoint",
	"nodesws s3:GetObject":                  "sealing a checkpoint reads its object's checksum (nodes.CheckpointDone, HeadObject); the run takes no checkpoint",
	"nodesws s3:DeleteObject":               "a checkpoint upload whose checksum does not match is deleted; the run takes no checkpoint",
	"nodesws s3:AbortMultipartUpload":       "a mismatched multipart checkpoint upload is aborted; the run takes no checkpoint",
	"nodesws s3:ListMultipartUploadParts":   "sealing a checkpoint of more than one part reads its parts' checksums; the run takes no checkpoint",
	"nodesws s3:ListBucket":                 "makes a missing checkpoint object a 404 rather than a 403 (limited to orgs/ by its condition)",
	"environments secretsmanager:GetSecretValue": "an ended environment's kept log is answered with a link signed with the link signer's key " +
		"(GET /v1/environments/{id}/logs); the run reads no log",
	"expiry s3:AbortMultipartUpload": "expiring an artifact aborts an upload left unfinished under it; the run's expiring artifact has none",
}

// authUnused justifies, for every function that authenticates requests,
// authentication's writes: a key's lastUsed is written at most once a
// minute (auth.LastUsedInterval), by whichever function sees the key first,
// and the failed-attempt counter only on a refused credential.
var authUnused = map[string]string{
	"dynamodb:UpdateItem": "authentication's writes: a key's lastUsed, at most once a minute by whichever function " +
		"sees the key first, and the failed-attempt counter on a refused credential",
}

// whyUnused is the reason grant a of group g may go uncalled, or "".
func whyUnused(g Group, a string) string {
	if why := justifiedUnused[g.Name+" "+a]; why != "" {
		return why
	}
	if len(g.Routes) > 0 || g.Socket {
		return authUnused[a]
	}
	return ""
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
	// A node that registers and never heartbeats: the lost-node sweep
	// declares it lost once its deadline passes.
	nodeToken := issueNodeCredential(ctx, t, ls.api.URL, "lambda-lost-node")
	lost, err := agent.NewClient(ls.api.URL, nodeToken, http.DefaultClient, "envlease-agent/test").Register(ctx,
		nodes.RegisterRequest{Name: "lambda-lost-node", Address: "127.0.0.1", Capacity: 1})
	if err != nil {
		t.Fatalf("register a node: %v", err)
	}
	// A connection recorded for the pool whose node is gone: the lease's
	// offer posts to it, is told it is gone, and forgets it.
	if err := ls.store.PutConnection(ctx, domain.NodeConnection{
		ID: "GoneConn0=", OrgID: "acme", Pool: "local", Connected: time.Now(),
	}, ""); err != nil {
		t.Fatal(err)
	}
	leased, err := c.Lease(ctx, client.LeaseRequest{Template: "sleeper", Pool: "local", Hard: "2s"})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	if ls.rec.Calls("environments", "execute-api:ManageConnections") == 0 {
		t.Errorf("the lease was offered to no connection of its pool")
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
	poll("declare the silent node lost", 4*time.Minute, scheduled("timeouts"), "lostnodes", func() bool {
		n, err := ls.store.GetNode(ctx, "acme", lost.Node.ID)
		return err == nil && n.State == domain.NodeLost
	})
	t.Logf("artifact %s expired and its objects deleted; environment %s stopped by its hard timeout", art.ID, leased.Environment.ID)
}
