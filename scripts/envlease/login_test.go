package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
)

func TestLoginFromStandardInputThenWhoami(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)

	// Before any login, commands say how to log in, with the auth code.
	r := u.fails(exitAuth, "", "whoami")
	contains(t, "stderr", r.stderr, "not logged in", "envlease login --url")

	r = u.run(clienttest.AliceToken+"\n", "login", "--url", s.URL)
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("login: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	contains(t, "login's message", r.stderr, "alice (admin) of acme", `profile "default"`)

	out := u.ok("whoami")
	for _, row := range [][]string{{"PROFILE", "default"}, {"ORGANIZATION", "acme"}, {"USER", "alice"}, {"ROLE", "admin"}, {"URL", s.URL}} {
		contains(t, "whoami", out, row[0]+strings.Repeat(" ", 14-len(row[0]))+row[1])
	}
	var who struct {
		Profile  string          `json:"profile"`
		URL      string          `json:"url"`
		Identity client.Identity `json:"identity"`
	}
	u.json(&who, "whoami")
	if who.Profile != "default" || who.URL != s.URL || who.Identity.User != "alice" || who.Identity.Organization != "acme" ||
		who.Identity.Role != "admin" || who.Identity.Key.ID != "key_fixture_alice_0" {
		t.Fatalf("whoami -o json: %+v", who)
	}

	// The token is kept where only its owner can read it.
	dir := filepath.Join(u.home, ".config", "envlease")
	for path, mode := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "config.json"): 0o600} {
		info, err := os.Stat(path)
		if err != nil || info.Mode().Perm() != mode {
			t.Fatalf("%s: %v, mode %v, want %v", path, err, info.Mode().Perm(), mode)
		}
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	contains(t, "config.json", string(cfg), clienttest.AliceToken, `"default": "default"`)

	// A second profile; the first stays the default.
	u.login(clienttest.BobToken, "--profile", "bob")
	contains(t, "whoami --profile bob", u.ok("whoami", "--profile", "bob"), "bob", "member")
	contains(t, "whoami", u.ok("whoami"), "alice")
	u.env = []string{"ENVLEASE_PROFILE=bob"}
	contains(t, "whoami with ENVLEASE_PROFILE", u.ok("whoami"), "bob")
	u.env = nil

	// ENVLEASE_TOKEN and ENVLEASE_URL override the profile.
	u.env = []string{"ENVLEASE_TOKEN=" + clienttest.CarolToken}
	contains(t, "whoami with ENVLEASE_TOKEN", u.ok("whoami"), "carol", "globex")
	u.env = []string{"ENVLEASE_URL=http://127.0.0.1:1"}
	u.fails(exitError, "", "whoami")
	u.env = nil
}

func TestLoginRefusesABadTokenAndSavesNothing(t *testing.T) {
	s := clienttest.Start(t)
	u := newUser(t, s)
	r := u.fails(exitAuth, "els_cli_notatoken00000000000000000000000000000000000\n", "login", "--url", s.URL)
	contains(t, "stderr", r.stderr, "401")
	if _, err := os.Stat(filepath.Join(u.home, ".config", "envlease", "config.json")); !os.IsNotExist(err) {
		t.Fatalf("a refused token was saved: %v", err)
	}
	// No token, a missing URL, and a token given as an argument are usage errors.
	u.fails(exitUsage, "", "login", "--url", s.URL)
	u.fails(exitUsage, clienttest.AliceToken, "login")
	u.fails(exitUsage, "", "login", "--url", s.URL, clienttest.AliceToken)
	u.fails(exitUsage, clienttest.AliceToken, "login", "--url", "ftp://127.0.0.1:8080")
	// An address without a scheme is completed (http:// on this machine),
	// and the user is told.
	r = u.run(clienttest.AliceToken+"\n", "login", "--url", strings.TrimPrefix(s.URL, "http://"))
	if r.code != 0 {
		t.Fatalf("login without a scheme: exit %d: %s", r.code, r.stderr)
	}
	contains(t, "login without a scheme", r.stderr, "has no scheme: using "+s.URL)
}

func TestLogoutRevokes(t *testing.T) {
	s := clienttest.Start(t)
	admin := newUser(t, s)
	admin.login(clienttest.AliceToken)
	token := strings.TrimSpace(admin.ok("tokens", "create", "laptop"))
	if !strings.HasPrefix(token, "els_cli_") {
		t.Fatalf("tokens create printed %q", token)
	}

	laptop := newUser(t, s)
	laptop.login(token)
	contains(t, "whoami", laptop.ok("whoami"), "alice", `"laptop"`)
	laptop.ok("logout", "--revoke")
	laptop.fails(exitAuth, "", "whoami")
	// The token no longer works anywhere.
	laptop.env = []string{"ENVLEASE_URL=" + s.URL, "ENVLEASE_TOKEN=" + token}
	r := laptop.fails(exitAuth, "", "whoami")
	contains(t, "a revoked token's error", r.stderr, "revoked", "envlease login --url URL")
	laptop.env = nil

	// A profile whose token no longer works is forgotten by logout --revoke
	// all the same: there is nothing left to revoke.
	laptop.login(token2(t, admin))
	admin.ok("keys", "revoke", laptopKey(t, laptop))
	r = laptop.run("", "logout", "--revoke")
	if r.code != 0 {
		t.Fatalf("logout --revoke with a revoked token: exit %d: %s", r.code, r.stderr)
	}
	contains(t, "logout", r.stderr, "no longer works", "Logged out")
	contains(t, "whoami after logout", laptop.fails(exitAuth, "", "whoami").stderr, "not logged in")
	// And the admin sees it revoked.
	var keys struct {
		Keys []struct {
			Name    string  `json:"name"`
			Revoked *string `json:"revoked"`
		} `json:"keys"`
	}
	admin.json(&keys, "keys", "ls")
	for _, k := range keys.Keys {
		if k.Name == "laptop" && k.Revoked == nil {
			t.Fatal("logout --revoke left the token valid")
		}
	}
}

// token2 is a second CLI token of alice's.
func token2(t *testing.T, admin *user) string {
	t.Helper()
	return strings.TrimSpace(admin.ok("tokens", "create", "laptop-2"))
}

// laptopKey is the key id of the token u is logged in with.
func laptopKey(t *testing.T, u *user) string {
	t.Helper()
	var who struct {
		Identity client.Identity `json:"identity"`
	}
	u.json(&who, "whoami")
	return who.Identity.Key.ID
}
