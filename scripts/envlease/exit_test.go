package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/clienttest"
)

// The documented exit codes, as a script sees them.
func TestExitCodes(t *testing.T) {
	s := clienttest.Start(t)
	alice := newUser(t, s)
	alice.login(clienttest.AliceToken)
	bob := newUser(t, s)
	bob.login(clienttest.BobToken)
	carol := newUser(t, s) // globex: its shell allows one live environment
	carol.login(clienttest.CarolToken)
	bad := newUser(t, s)
	bad.env = []string{"ENVLEASE_URL=" + s.URL, "ENVLEASE_TOKEN=els_cli_000000000000000000000000000000000000000000"}
	nobody := newUser(t, s)

	var first struct {
		Environment struct{ ID string } `json:"environment"`
	}
	carol.json(&first, "lease", "-t", "shell")

	cases := []struct {
		name string
		u    *user
		args []string
		code int
		says string
	}{
		{"ok", alice, []string{"whoami"}, exitOK, ""},
		{"a refused token", bad, []string{"ls"}, exitAuth, "401"},
		{"not logged in", nobody, []string{"ls"}, exitAuth, "not logged in"},
		{"a member creating an organization key", bob, []string{"keys", "create", "ci"}, exitAuth, "403"},
		{"an unknown environment", alice, []string{"get", "env_doesnotexist"}, exitNotFound, "404"},
		{"another organization's environment", alice, []string{"get", first.Environment.ID}, exitNotFound, "404"},
		{"an unknown artifact", alice, []string{"artifacts", "get", "art_doesnotexist"}, exitNotFound, "404"},
		{"the quota", carol, []string{"lease", "-t", "shell"}, exitQuota, "quota"},
		{"an unknown template", alice, []string{"lease", "-t", "nope"}, exitError, "422"},
		{"a bad label", alice, []string{"lease", "-t", "shell", "--label", "Bad Key=x"}, exitError, "422"},
		{"a label without =", alice, []string{"lease", "-t", "shell", "--label", "team"}, exitUsage, "KEY=VALUE"},
		{"a bad duration", alice, []string{"lease", "-t", "shell", "--idle", "soon"}, exitUsage, "--idle"},
		{"an unknown flag", alice, []string{"ls", "--frob"}, exitUsage, "--frob"},
		{"a missing argument", alice, []string{"rm"}, exitUsage, "usage"},
		{"a deadline already passed", alice, []string{"whoami", "--timeout", "1ns"}, exitTimeout, "timed out"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.u.fails(c.code, "", c.args...)
			if c.says != "" {
				contains(t, "stderr", r.stderr, c.says)
			}
		})
	}

	// With -o json the error is one JSON object on standard error, and
	// standard output stays empty.
	r := carol.fails(exitQuota, "", "lease", "-t", "shell", "-o", "json")
	var e struct {
		Error     string `json:"error"`
		Code      string `json:"code"`
		Status    int    `json:"status"`
		RequestID string `json:"requestId"`
		ExitCode  int    `json:"exitCode"`
	}
	if err := json.Unmarshal([]byte(r.stderr), &e); err != nil || r.stdout != "" {
		t.Fatalf("stderr %q, stdout %q: %v", r.stderr, r.stdout, err)
	}
	if e.Code != "quota" || e.Status != 429 || e.RequestID == "" || e.ExitCode != exitQuota || !strings.Contains(e.Error, "quota") {
		t.Fatalf("error object %+v", e)
	}
}
