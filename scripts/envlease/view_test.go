package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/domain"
)

// On a node whose agent runs as root (namespaces of its own), a process
// environment looks like its template to envlease exec: its user has a
// name, and the command starts at the template's workdir, not in the
// node's folder for it.
func TestExecSeesTemplateWorkdirAndUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the node's agent runs as this test: users and namespaces of their own need root")
	}
	if err := confine.ProbeNamespaces(); err != nil {
		t.Skipf("this machine cannot make namespaces: %v", err)
	}
	// An empty folder of the node at the template's path, outside /tmp
	// (which an environment may have a folder of its own over).
	top := fmt.Sprintf("/envlease-test-%d", rand.Uint64())
	t.Cleanup(func() { os.RemoveAll(top) })
	workdir := filepath.Join(top, "workspace")
	if err := os.MkdirAll(workdir, 0o755); err != nil {
		t.Fatal(err)
	}
	tpl := domain.Template{
		Name: "workbox", Command: []string{"sh", "-c", "exec sleep 3600"}, Runtime: "process", Workdir: workdir,
		Timeouts: domain.Timeouts{Idle: domain.Duration(30 * time.Minute), Hard: domain.Duration(6 * time.Hour)},
		Quota:    domain.Quota{MaxLeases: 1},
	}
	s := clienttest.Start(t, clienttest.WithTemplates("acme", tpl))
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	var leased client.Leased
	u.json(&leased, "lease", "--template", "workbox", "--wait")
	if out, want := u.ok("exec", leased.Environment.ID, "--", "sh", "-c", "whoami; id -un; pwd"), "envlease\nenvlease\n"+workdir+"\n"; out != want {
		t.Fatalf("whoami, id -un, pwd in the environment:\n%s\nwant\n%s", out, want)
	}
}
