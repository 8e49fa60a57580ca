package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
)

// run shows the log of an environment that fails to become ready; logs
// shows it again, kept, and -o json says where it is; another
// organization's environment is not found.
func TestLogsOfAFailedEnvironment(t *testing.T) {
	s := clienttest.Start(t, clienttest.WithTemplates("acme", brokenTemplate))
	u := newUser(t, s)
	u.login(clienttest.BobToken)

	r := u.fails(exitError, "", "run", "-t", "broken", "--", "sh", "-c", "echo ran")
	contains(t, "failed run", r.stderr, "The log of env_", "the database is missing", "] failed: process exited with status 3")
	m := regexp.MustCompile(`The log of (env_\S+?):`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("run's stderr names no log:\n%s", r.stderr)
	}
	id := m[1]

	out := u.ok("logs", id)
	contains(t, "logs", out, "the database is missing\n", "] started", "] failed: process exited with status 3")
	var where client.Logs
	u.json(&where, "logs", id)
	if where.Kept == nil || !strings.HasPrefix(where.Kept.Artifact, "art_") || where.Live != nil {
		t.Fatalf("logs -o json: %+v", where)
	}

	carol := newUser(t, s)
	carol.login(clienttest.CarolToken)
	carol.fails(exitNotFound, "", "logs", id)
	u.fails(exitUsage, "", "logs")
}
