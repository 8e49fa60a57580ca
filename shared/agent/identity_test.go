package agent_test

import (
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/identity"
)

// A token file is written under the environment's root, replaced whole,
// and never through a link the environment made to elsewhere on the node.
func TestWriteTokenIsConfined(t *testing.T) {
	root := t.TempDir()
	files := runtimes.Files{Root: root}
	tok := identity.Token{Audience: "sts.amazonaws.com", Token: "first", Path: identity.TokenPath("sts.amazonaws.com")}
	if err := agent.WriteToken(files, tok); err != nil {
		t.Fatal(err)
	}
	at := filepath.Join(root, "run/envlease/identity/sts.amazonaws.com/token")
	if b, err := os.ReadFile(at); err != nil || string(b) != "first" {
		t.Fatalf("token file: %q %v", b, err)
	}
	if st, _ := os.Stat(at); st.Mode().Perm() != 0o400 {
		t.Errorf("token file mode %v, want 0400", st.Mode().Perm())
	}
	tok.Token = "second"
	if err := agent.WriteToken(files, tok); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(at); string(b) != "second" {
		t.Errorf("refreshed token file: %q", b)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "run/envlease/identity/sts.amazonaws.com/.token.*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}

	// The environment replaced its identity folder by a link out of its
	// root: the write fails, and nothing is written outside.
	outside := t.TempDir()
	if err := os.RemoveAll(filepath.Join(root, "run/envlease/identity")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "run/envlease/identity")); err != nil {
		t.Fatal(err)
	}
	if err := agent.WriteToken(files, tok); err == nil {
		t.Error("a token written through a link out of the environment's root")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("written outside the root: %v", entries)
	}
	// A path outside the identity folder is refused.
	if err := agent.WriteToken(files, identity.Token{Token: "x", Path: "/etc/passwd"}); err == nil {
		t.Error("a token path outside the identity folder was written")
	}
}

// The token's folders and file become the environment user's; a folder on
// the way that the environment replaced by a link to another of its own
// folders fails the write, and that folder's owner is left alone.
func TestWriteTokenOwnerNotRedirected(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners takes root")
	}
	root := t.TempDir()
	files := runtimes.Files{Root: root, Owner: &runtimes.Owner{UID: 4321, GID: 4321}}
	tok := identity.Token{Audience: "sts.amazonaws.com", Token: "first", Path: identity.TokenPath("sts.amazonaws.com")}
	if err := agent.WriteToken(files, tok); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"run/envlease", "run/envlease/identity", "run/envlease/identity/sts.amazonaws.com", "run/envlease/identity/sts.amazonaws.com/token"} {
		if uid := ownerOf(t, filepath.Join(root, p)); uid != 4321 {
			t.Errorf("%s owned by %d, want the environment's user", p, uid)
		}
	}
	other := filepath.Join(root, "home/other")
	if err := os.MkdirAll(filepath.Join(other, "sts.amazonaws.com"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "run/envlease/identity")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../home/other", filepath.Join(root, "run/envlease/identity")); err != nil {
		t.Fatal(err)
	}
	if err := agent.WriteToken(files, tok); err == nil {
		t.Error("a token written through a link the environment made")
	}
	for _, p := range []string{other, filepath.Join(other, "sts.amazonaws.com")} {
		if uid := ownerOf(t, p); uid != 0 {
			t.Errorf("%s owned by %d: a chown followed the environment's link", p, uid)
		}
	}
	if _, err := os.Stat(filepath.Join(other, "sts.amazonaws.com/token")); err == nil {
		t.Error("the token was written where the link led")
	}
}

func ownerOf(t *testing.T, p string) uint32 {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Uid
}

// The variables an identity gives: the first audience's file, the first
// sts.amazonaws.com one for the AWS SDKs, the folder; none without.
func TestIdentityPaths(t *testing.T) {
	got := agent.IdentityPaths(&domain.TemplateIdentity{Audiences: []string{"vault", "sts.amazonaws.com"}})
	want := map[string]string{
		"ENVLEASE_IDENTITY_TOKEN_FILE": "/run/envlease/identity/vault/token",
		"AWS_WEB_IDENTITY_TOKEN_FILE":  "/run/envlease/identity/sts.amazonaws.com/token",
		"ENVLEASE_IDENTITY_DIR":        "/run/envlease/identity",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("paths %v, want %v", got, want)
	}
	if got := agent.IdentityPaths(nil); got != nil {
		t.Errorf("paths without an identity: %v", got)
	}
	// A process sees them under its folder; the template's own env wins.
	e := runtimes.Env{Template: domain.Template{Env: map[string]string{"AWS_WEB_IDENTITY_TOKEN_FILE": "/mine"}}, Paths: want}
	env := e.TemplateWithPaths("/node/envs/env_1").Env
	if env["AWS_WEB_IDENTITY_TOKEN_FILE"] != "/mine" || env["ENVLEASE_IDENTITY_TOKEN_FILE"] != "/node/envs/env_1/run/envlease/identity/vault/token" {
		t.Errorf("process env %v", env)
	}
	if c := e.TemplateWithPaths("/").Env; c["ENVLEASE_IDENTITY_DIR"] != "/run/envlease/identity" {
		t.Errorf("container env %v", c)
	}
}
