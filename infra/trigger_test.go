package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/envlease/envlease/infra/bundle"
)

// The table streams new images: the outbox trigger's filter reads GSI2PK.
func TestTableStream(t *testing.T) {
	s := synth(t)
	check(t, "table stream", func() {
		s.Assertion.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), map[string]any{
			"StreamSpecification": map[string]any{"StreamViewType": "NEW_IMAGE"},
		})
	})
}

// One event source mapping, from the table's stream to each WakeOnOutbox
// group's function (deliveries), newest records only, a batch window of a
// second, bounded retries and age, no bisecting, one batch per shard at a
// time, and the outbox filter.
func TestOutboxTrigger(t *testing.T) {
	s := synth(t)
	var woken []string
	for _, g := range Groups {
		if g.WakeOnOutbox {
			woken = append(woken, g.Name)
		}
	}
	if strings.Join(woken, ",") != "deliveries" {
		t.Fatalf("groups woken by the outbox: %v, want deliveries", woken)
	}
	maps := s.resources("AWS::Lambda::EventSourceMapping")
	if len(maps) != 1 {
		t.Fatalf("%d event source mappings, want 1", len(maps))
	}
	check(t, "event source mapping", func() {
		s.Assertion.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), map[string]any{
			"FunctionName":                   map[string]any{"Ref": s.FunctionIDs["deliveries"]},
			"EventSourceArn":                 map[string]any{"Fn::GetAtt": []any{logicalID(s.Stack.Table), "StreamArn"}},
			"StartingPosition":               "LATEST",
			"BatchSize":                      float64(triggerBatchSize),
			"MaximumBatchingWindowInSeconds": float64(1),
			"BisectBatchOnFunctionError":     false,
			"MaximumRetryAttempts":           float64(2),
			"MaximumRecordAgeInSeconds":      float64(60),
			"ParallelizationFactor":          float64(1),
			"FilterCriteria":                 map[string]any{"Filters": assertions.Match_AnyValue()},
		})
	})
	for id, r := range maps {
		fc, _ := props(r)["FilterCriteria"].(map[string]any)
		filters := asSlice(fc["Filters"])
		if len(filters) != 1 {
			t.Fatalf("mapping %s: filters %v, want one", id, fc)
		}
		var pattern map[string]any
		if err := json.Unmarshal([]byte(filters[0].(map[string]any)["Pattern"].(string)), &pattern); err != nil {
			t.Fatalf("mapping %s: pattern: %v", id, err)
		}
		checkOutboxFilter(t, pattern)
	}
}

// checkOutboxFilter runs the pattern over stream records: the sample batch's
// (a new event entering the outbox) passes; the job's own writes and other
// items' do not.
func checkOutboxFilter(t *testing.T, pattern map[string]any) {
	t.Helper()
	root, err := bundle.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "events", "stream-deliveries.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sample struct{ Records []map[string]any }
	if err := json.Unmarshal(raw, &sample); err != nil || len(sample.Records) != 1 {
		t.Fatalf("sample stream batch: %v", err)
	}
	s := func(v string) map[string]any { return map[string]any{"S": v} }
	record := func(name string, keys, image map[string]any) map[string]any {
		ddb := map[string]any{"Keys": keys, "StreamViewType": "NEW_IMAGE"}
		if image != nil {
			ddb["NewImage"] = image
		}
		return map[string]any{"eventName": name, "eventSource": "aws:dynamodb", "dynamodb": ddb}
	}
	evKeys := map[string]any{"PK": s("EVT#acme"), "SK": s("evt_1")}
	dlvKeys := map[string]any{"PK": s("WHD#acme#whk_1"), "SK": s("dlv_1")}
	envKeys := map[string]any{"PK": s("ORG#acme"), "SK": s("ENV#env_1")}
	for _, tc := range []struct {
		name   string
		record map[string]any
		want   bool
	}{
		{"the sample: a new event in the outbox", sample.Records[0], true},
		{"a new event in another outbox shard", record("INSERT", evKeys, map[string]any{"PK": s("EVT#acme"), "GSI2PK": s("WHDUE#31")}), true},
		{"the fan-out takes the event out of the outbox (a replace)", record("MODIFY", evKeys, map[string]any{"PK": s("EVT#acme")}), false},
		{"a rewrite of an event still in the outbox", record("MODIFY", evKeys, map[string]any{"PK": s("EVT#acme"), "GSI2PK": s("WHDUE#3")}), false},
		{"the fan-out creates a delivery, tried in the same run", record("INSERT", dlvKeys, map[string]any{"PK": s("WHD#acme#whk_1"), "GSI2PK": s("WHDUE#3")}), false},
		{"an attempt recorded, retry due later", record("MODIFY", dlvKeys, map[string]any{"PK": s("WHD#acme#whk_1"), "GSI2PK": s("WHDUE#3")}), false},
		{"an event written outside the outbox", record("INSERT", evKeys, map[string]any{"PK": s("EVT#acme")}), false},
		{"a new live environment in its due index", record("INSERT", envKeys, map[string]any{"PK": s("ORG#acme"), "GSI2PK": s("ENVDUE#3")}), false},
		{"an event's TTL ran out", record("REMOVE", evKeys, nil), false},
	} {
		if got := filterMatches(pattern, tc.record); got != tc.want {
			t.Errorf("%s: filter passes it = %v, want %v (pattern %v)", tc.name, got, tc.want, pattern)
		}
	}
}

// filterMatches evaluates the part of Lambda's filter syntax the trigger
// uses: nested objects, and leaf lists of exact strings or {"prefix": p},
// any of which may match; every key of the pattern must.
func filterMatches(pattern, record map[string]any) bool {
	for k, p := range pattern {
		v, ok := record[k]
		if !ok {
			return false
		}
		switch p := p.(type) {
		case map[string]any:
			sub, ok := v.(map[string]any)
			if !ok || !filterMatches(p, sub) {
				return false
			}
		case []any:
			str, _ := v.(string)
			hit := false
			for _, alt := range p {
				switch alt := alt.(type) {
				case string:
					hit = hit || str == alt
				case map[string]any:
					prefix, ok := alt["prefix"].(string)
					hit = hit || ok && strings.HasPrefix(str, prefix)
				}
			}
			if !hit {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// The woken function's role reads the stream on the stream's ARN, lists
// streams in a statement of its own, and no other role touches the stream.
func TestStreamGrant(t *testing.T) {
	s := synth(t)
	roleOf := map[string]string{}
	for id, r := range s.resources("AWS::Lambda::Function") {
		roleOf[ref(props(r)["Role"])] = id
	}
	streamArn := `{"Fn::GetAtt":["` + logicalID(s.Stack.Table) + `","StreamArn"]}`
	stream := map[string]bool{"dynamodb:ListStreams": true}
	for _, a := range streamReadActions {
		stream[a] = true
	}
	var read, list []string
	for _, ps := range policyStatements(s) {
		var actions []string
		for _, a := range strList(ps.Statement["Action"]) {
			if stream[a] {
				actions = append(actions, a)
			}
		}
		if len(actions) == 0 {
			continue
		}
		for _, p := range ps.Principals {
			if roleOf[p] != s.FunctionIDs["deliveries"] {
				t.Errorf("%s (function %q) may %v", p, roleOf[p], actions)
			}
		}
		res := strList(ps.Statement["Resource"])
		sort.Strings(actions)
		switch {
		case len(actions) == 1 && actions[0] == "dynamodb:ListStreams":
			if len(res) != 1 || res[0] != "*" || len(strList(ps.Statement["Action"])) != 1 {
				t.Errorf("ListStreams statement %v: want it alone, on *", ps.Statement)
			}
			list = append(list, actions...)
		default:
			if len(res) != 1 || res[0] != streamArn {
				t.Errorf("stream reads %v on %v, want the table's stream %s", actions, res, streamArn)
			}
			read = append(read, actions...)
		}
	}
	sort.Strings(read)
	want := append([]string{}, streamReadActions...)
	sort.Strings(want)
	if strings.Join(read, " ") != strings.Join(want, " ") || len(list) != 1 {
		t.Errorf("stream grants: reads %v, lists %v; want %v and ListStreams once", read, list, want)
	}
}
