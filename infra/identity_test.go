package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"

	"github.com/envlease/envlease/infra/bundle"
)

// identityApp synthesizes the stack with the given context.
func identityApp(t *testing.T, ctx map[string]interface{}) (*EnvleaseStack, map[string]any, error) {
	t.Helper()
	root, err := bundle.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	_, stack, err := newApp(appOptions{Root: root, Outdir: t.TempDir(), Groups: Groups, AssetDirs: fakeAssetDirs(t), Context: ctx})
	if err != nil {
		return nil, nil, err
	}
	tmpl := *assertions.Template_FromStack(stack.Stack, nil).ToJSON()
	return stack, tmpl["Resources"].(map[string]any), nil
}

func resourcesOfType(res map[string]any, typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range res {
		if m := r.(map[string]any); m["Type"] == typ {
			out[id] = m["Properties"].(map[string]any)
		}
	}
	return out
}

// The identity key is an ECC_NIST_P256 signing key; only the identity
// function may use it, to sign and read its public half, on that key
// alone; no other function has any KMS action. The function is told the key
// and the issuer (the API's own endpoint by default).
func TestIdentityKeyLeastPrivilege(t *testing.T) {
	stack, res, err := identityApp(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := resourcesOfType(res, "AWS::KMS::Key")
	keyID := logicalID(stack.IdentityKey)
	key, ok := keys[keyID]
	if !ok || key["KeySpec"] != "ECC_NIST_P256" || key["KeyUsage"] != "SIGN_VERIFY" {
		t.Fatalf("identity key %s: %v", keyID, key)
	}
	if r := res[keyID].(map[string]any); r["DeletionPolicy"] != "Retain" {
		t.Errorf("identity key deletion policy %v, want Retain", r["DeletionPolicy"])
	}
	// The key policy names no principal but the account.
	if b, _ := json.Marshal(key["KeyPolicy"]); strings.Contains(string(b), "lambda") || strings.Contains(string(b), "Role") {
		t.Errorf("the key policy names a function: %s", b)
	}
	roleOf := map[string]string{}
	for _, g := range Groups {
		roleOf[logicalID(stack.Functions[g.Name].Role())] = g.Name
	}
	signers := 0
	for id, p := range resourcesOfType(res, "AWS::IAM::Policy") {
		doc, _ := json.Marshal(p["PolicyDocument"])
		var d struct {
			Statement []struct {
				Sid      string
				Action   any
				Resource any
			}
		}
		json.Unmarshal(doc, &d)
		var group string
		roles, _ := p["Roles"].([]any)
		for _, r := range roles {
			b, _ := json.Marshal(r)
			for rid, g := range roleOf {
				if strings.Contains(string(b), `"`+rid+`"`) {
					group = g
				}
			}
		}
		for _, st := range d.Statement {
			a, _ := json.Marshal(st.Action)
			if !strings.Contains(string(a), "kms:") {
				continue
			}
			r, _ := json.Marshal(st.Resource)
			if group != "identity" {
				// Another function may use another key (the secrets
				// key, checked by TestSecretsKey), never the identity
				// key nor every key.
				if strings.Contains(string(r), keyID) || strings.Contains(string(r), "*") {
					t.Errorf("policy %s (function %q) has KMS actions %s on %s", id, group, a, r)
				}
				continue
			}
			signers++
			if !reflect.DeepEqual(st.Action, []any{"kms:GetPublicKey", "kms:Sign"}) || !strings.Contains(string(r), keyID) || strings.Contains(string(r), "*") {
				t.Errorf("identity function's KMS grant: %s on %s, want kms:Sign and kms:GetPublicKey on the key alone", a, r)
			}
		}
	}
	if signers != 1 {
		t.Errorf("%d KMS grants of the identity function, want 1", signers)
	}
	fn := res[logicalID(stack.Functions["identity"])].(map[string]any)
	vars := fn["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
	issuer, _ := json.Marshal(vars["ISSUER_URL"])
	kmsKey, _ := json.Marshal(vars["IDENTITY_KMS_KEY"])
	if !strings.Contains(string(issuer), logicalID(stack.Api)) || !strings.Contains(string(kmsKey), keyID) {
		t.Errorf("identity function: ISSUER_URL %s, IDENTITY_KMS_KEY %s", issuer, kmsKey)
	}
	if len(resourcesOfType(res, "AWS::IAM::OIDCProvider")) != 0 {
		t.Error("an OIDC provider without workload roles asked for")
	}
}

// envlease:workloadRoles makes, for the configured issuer, an IAM OIDC
// provider (audience sts.amazonaws.com) and a role per subject that only
// tokens with that aud and sub may assume.
func TestWorkloadRole(t *testing.T) {
	const issuer = "https://api.envlease.example.com"
	const sub = "org:acme:template:ci:project:payments"
	stack, res, err := identityApp(t, map[string]interface{}{ctxIssuerURL: issuer, ctxWorkloadRoles: sub})
	if err != nil {
		t.Fatal(err)
	}
	provs := resourcesOfType(res, "AWS::IAM::OIDCProvider")
	if len(provs) != 1 {
		t.Fatalf("%d OIDC providers, want 1", len(provs))
	}
	var provID string
	for id, p := range provs {
		provID = id
		if p["Url"] != issuer || !reflect.DeepEqual(p["ClientIdList"], []any{"sts.amazonaws.com"}) {
			t.Errorf("OIDC provider: %v", p)
		}
	}
	found := 0
	for _, p := range resourcesOfType(res, "AWS::IAM::Role") {
		doc, _ := json.Marshal(p["AssumeRolePolicyDocument"])
		if !strings.Contains(string(doc), "AssumeRoleWithWebIdentity") {
			continue
		}
		found++
		want := `"Condition":{"StringEquals":{"api.envlease.example.com:aud":"sts.amazonaws.com"},"StringLike":{"api.envlease.example.com:sub":"` + sub + `"}}`
		if !strings.Contains(string(doc), want) || !strings.Contains(string(doc), `"Federated":{"Fn::GetAtt":["`+provID+`","Arn"]}`) {
			t.Errorf("trust policy %s, want the provider and %s", doc, want)
		}
		if p["ManagedPolicyArns"] != nil || p["Policies"] != nil {
			t.Errorf("the workload role grants something itself: %v", p)
		}
	}
	if found != 1 {
		t.Errorf("%d roles assumed with web identity, want 1", found)
	}
	fn := res[logicalID(stack.Functions["identity"])].(map[string]any)
	vars := fn["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
	if vars["ISSUER_URL"] != issuer {
		t.Errorf("ISSUER_URL %v, want %s", vars["ISSUER_URL"], issuer)
	}

	// A role needs an issuer it can name; an issuer is HTTPS; a subject is
	// of the documented form.
	for _, ctx := range []map[string]interface{}{
		{ctxWorkloadRoles: sub},
		{ctxIssuerURL: "http://api.envlease.example.com"},
		{ctxIssuerURL: issuer, ctxWorkloadRoles: "acme/ci"},
	} {
		if _, _, err := identityApp(t, ctx); err == nil {
			t.Errorf("context %v accepted", ctx)
		}
	}
}
