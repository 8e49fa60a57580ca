package main

import (
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/envlease/envlease/shared/store"
)

// writeActions are the table actions that change items.
var writeActions = map[string]bool{
	"dynamodb:PutItem": true, "dynamodb:UpdateItem": true, "dynamodb:DeleteItem": true,
	"dynamodb:BatchWriteItem": true, "dynamodb:PartiQLInsert": true, "dynamodb:PartiQLUpdate": true,
	"dynamodb:PartiQLDelete": true,
}

// The read-mostly functions write only what authentication writes: their
// UpdateItem is confined by dynamodb:LeadingKeys to the token and address
// items, on the table alone, and no other statement lets them write.
func TestReadGroupsWriteOnlyAuthItems(t *testing.T) {
	s := synth(t)
	tableID := ""
	for id := range s.resources("AWS::DynamoDB::Table") {
		tableID = id
	}
	var patterns []any
	for _, p := range store.AuthWritePrefixes {
		patterns = append(patterns, p+"*")
	}
	want := map[string]any{
		"ForAllValues:StringLike": map[string]any{"dynamodb:LeadingKeys": patterns},
		"Null":                    map[string]any{"dynamodb:LeadingKeys": "false"},
	}
	roleOfGroup := map[string]string{}
	for name, fnID := range s.FunctionIDs {
		roleOfGroup[name] = ref(props(s.Template["Resources"].(map[string]any)[fnID].(map[string]any))["Role"])
	}
	statements := policyStatements(s)
	checked := 0
	for _, g := range Groups {
		if !g.Table.ReadOnly {
			continue
		}
		role := roleOfGroup[g.Name]
		if role == "" {
			t.Fatalf("%s: no role", g.Name)
		}
		check(t, g.Name+": conditioned auth write", func() {
			s.Assertion.HasResourceProperties(jsii.String("AWS::IAM::Policy"), map[string]any{
				"Roles": assertions.Match_ArrayWith(&[]any{map[string]any{"Ref": role}}),
				"PolicyDocument": map[string]any{
					"Statement": assertions.Match_ArrayWith(&[]any{assertions.Match_ObjectLike(&map[string]any{
						"Effect":    "Allow",
						"Action":    "dynamodb:UpdateItem",
						"Resource":  map[string]any{"Fn::GetAtt": []any{tableID, "Arn"}},
						"Condition": assertions.Match_Exact(want),
					})}),
				},
			})
		})
		for _, ps := range statements {
			if !contains(ps.Principals, role) || ps.Statement["Effect"] != "Allow" {
				continue
			}
			var writes []string
			for _, a := range strList(ps.Statement["Action"]) {
				if writeActions[a] || a == "dynamodb:*" {
					writes = append(writes, a)
				}
			}
			if len(writes) == 0 {
				continue
			}
			checked++
			sort.Strings(writes)
			if strings.Join(writes, " ") != "dynamodb:UpdateItem" {
				t.Errorf("%s may %v", g.Name, writes)
			}
			cond, _ := ps.Statement["Condition"].(map[string]any)
			keys, _ := cond["ForAllValues:StringLike"].(map[string]any)
			if got := strList(keys["dynamodb:LeadingKeys"]); strings.Join(got, " ") != "TOKEN#* ADDR#*" {
				t.Errorf("%s: UpdateItem with leading keys %v, want TOKEN#* ADDR#*", g.Name, got)
			}
			if res := strList(ps.Statement["Resource"]); len(res) != 1 || ref(ps.Statement["Resource"]) != tableID {
				t.Errorf("%s: UpdateItem on %v, want the table alone", g.Name, res)
			}
		}
	}
	if checked < 3 {
		t.Fatalf("only %d read-only groups' writes were checked", checked)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Every function that authenticates requests (its HTTP routes, or the node
// protocol's $connect authorizer) may do what authentication does: the
// runtime test cannot be relied on to see it, for a key's lastUsed is
// written at most once a minute, by whichever function sees the key first.
func TestAuthenticatingFunctionsMayAuthenticate(t *testing.T) {
	for _, g := range Groups {
		if (len(g.Routes) == 0 && !g.Socket) || len(g.Table.actions()) == 0 {
			continue // a job, or a public function with no data access
		}
		for _, a := range authActions {
			if !contains(g.Table.actions(), a) {
				t.Errorf("%s authenticates requests but may not %s", g.Name, a)
			}
		}
	}
}
