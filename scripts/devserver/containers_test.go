package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent/runc/pinned"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/fixture"
)

// Where the devserver runs as root, its demo offers the container template
// box, whose image it builds and serves itself: a lease is ready and its
// page is reached through the tunnel.
func TestDemoContainerTemplate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("containers need the agent to run as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := devstack.RuncBinary(ctx, os.Stderr); err != nil {
		t.Fatal(err)
	}
	base := startDevserverWith(t, func(o *options) { o.containers = true })
	c := api{t: t, base: base, token: apitest.BobToken}
	var leased envAnswer
	if s := c.do("POST", "/v1/environments", map[string]any{"template": "box"}, &leased); s != 201 {
		t.Fatalf("lease box: %d", s)
	}
	e := c.waitState(leased.Environment.ID, domain.StateReady, 2*time.Minute)
	status, body := clienttest.GetThroughTunnel(t, base, c.token, e.ID, e.Exports[0].Target, "/")
	if status != 200 || !strings.HasPrefix(body, "hello from a container") {
		t.Fatalf("the box's page: %d %q", status, body)
	}
}

// Without runc (none built, and no go command to build it) the demo says
// so in one line and keeps its process templates.
func TestDemoWithoutRunc(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	f, err := fixture.Parse(demoFixture)
	if err != nil {
		t.Fatal(err)
	}
	note, stop := containerDemo(context.Background(), &f, nil)
	defer stop()
	if os.Geteuid() == 0 && !strings.Contains(note, "runc "+pinned.Version+" was not built") || strings.Contains(note, "\n") {
		t.Errorf("note = %q", note)
	}
	for _, o := range f.Orgs {
		for _, tpl := range o.Templates {
			if tpl.Runtime == domain.RuntimeContainer {
				t.Errorf("a container template %s without runc", tpl.Name)
			}
		}
	}
}
