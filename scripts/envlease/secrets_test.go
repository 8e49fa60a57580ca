package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// Secrets are set from standard input or a file (never an argument), listed
// without values, and removed; a member may list but not set them, and a
// bad name is refused naming the problem.
func TestSecretsCommands(t *testing.T) {
	s := clienttest.Start(t)
	admin := newUser(t, s)
	admin.login(clienttest.AliceToken)
	const value = "ghp_not-a-real-token-0123456789"
	if r := admin.run(value+"\n", "secrets", "set", "GITHUB_TOKEN"); r.code != 0 || !strings.Contains(r.stdout+r.stderr, "GITHUB_TOKEN") {
		t.Fatalf("set from stdin: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("registry-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin.ok("secrets", "set", "REGISTRY_PASSWORD", "--from-file", file)
	out := admin.ok("secrets", "ls")
	contains(t, "secrets ls", out, "GITHUB_TOKEN", "REGISTRY_PASSWORD", "alice")
	if strings.Contains(out, value) || strings.Contains(out, "registry-password") {
		t.Fatalf("ls shows a value:\n%s", out)
	}
	var listed struct {
		Secrets []domain.Secret `json:"secrets"`
	}
	admin.json(&listed, "secrets", "ls")
	if len(listed.Secrets) != 2 || listed.Secrets[0].Name != "GITHUB_TOKEN" || listed.Secrets[0].Size != len(value) {
		t.Fatalf("listed %+v", listed.Secrets)
	}
	if r := admin.run("", "secrets", "set", "EMPTY"); r.code == 0 || !strings.Contains(r.stderr, "no value") {
		t.Fatalf("set without a value: exit %d %s", r.code, r.stderr)
	}
	if r := admin.run("x", "secrets", "set", "9bad-name"); r.code == 0 || !strings.Contains(r.stderr, "name") {
		t.Fatalf("bad name: exit %d %s", r.code, r.stderr)
	}
	member := newUser(t, s)
	member.login(clienttest.BobToken)
	contains(t, "member ls", member.ok("secrets", "ls"), "GITHUB_TOKEN")
	if r := member.run("x", "secrets", "set", "MINE"); r.code == 0 {
		t.Fatalf("a member set a secret: %s", r.stdout)
	}
	admin.ok("secrets", "rm", "REGISTRY_PASSWORD")
	if out := admin.ok("secrets", "ls"); strings.Contains(out, "REGISTRY_PASSWORD") {
		t.Fatalf("removed secret still listed:\n%s", out)
	}
}
