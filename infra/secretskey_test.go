package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestSecretsKey: the stack has a KMS key for secrets, rotated and
// retained; the secrets function may only make data keys with it and the
// nodes function only open them, each only with the secrets' encryption
// context; no other role may make or open data keys, with it or another
// key, nor do anything else with it.
func TestSecretsKey(t *testing.T) {
	s := synth(t)
	var keyID string
	for id, k := range s.resources("AWS::KMS::Key") {
		if !strings.HasPrefix(id, "SecretsKey") {
			continue // another key of the stack's, with its own test
		}
		keyID = id
		if props(k)["EnableKeyRotation"] != true {
			t.Errorf("the secrets key does not rotate: %v", props(k))
		}
		if k["DeletionPolicy"] != "Retain" {
			t.Errorf("the secrets key is not retained: %v", k["DeletionPolicy"])
		}
	}
	roleOf := map[string]string{}
	for id, r := range s.resources("AWS::Lambda::Function") {
		roleOf[ref(props(r)["Role"])] = id
	}
	groupOf := map[string]string{}
	for name, id := range s.FunctionIDs {
		groupOf[id] = name
	}
	if keyID == "" {
		t.Fatal("no secrets key")
	}
	got := map[string][]string{}
	for _, ps := range policyStatements(s) {
		var kms []string
		for _, a := range strList(ps.Statement["Action"]) {
			// The actions that open or make data keys, on any key, and
			// anything on the secrets key.
			if a == "kms:Decrypt" || a == "kms:GenerateDataKey" || strings.HasPrefix(a, "kms:") && strings.Contains(jsonOf(ps.Statement["Resource"]), keyID) {
				kms = append(kms, a)
			}
		}
		if len(kms) == 0 {
			continue
		}
		if !strings.Contains(jsonOf(ps.Statement["Resource"]), keyID) {
			t.Errorf("%v: %v on something else than the secrets key: %v", ps.Principals, kms, ps.Statement["Resource"])
		}
		if !strings.Contains(jsonOf(ps.Statement["Condition"]), "envlease:secret") {
			t.Errorf("%v: %v without the secrets' encryption context condition", ps.Principals, kms)
		}
		for _, p := range ps.Principals {
			got[groupOf[roleOf[p]]] = append(got[groupOf[roleOf[p]]], kms...)
		}
	}
	want := map[string]string{"secrets": "kms:GenerateDataKey", "nodes": "kms:Decrypt"}
	for name, actions := range got {
		if w, ok := want[name]; !ok || strings.Join(actions, " ") != w {
			t.Errorf("%q may %v with the secrets key, want %q", name, actions, w)
		}
	}
	for name := range want {
		if got[name] == nil {
			t.Errorf("%s has no right on the secrets key", name)
		}
	}
}
