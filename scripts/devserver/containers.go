package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/envlease/envlease/shared/agent/runc/pinned"
	"github.com/envlease/envlease/shared/devstack"
	"github.com/envlease/envlease/shared/devstack/debian"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/fixture"
)

// boxCommand serves a page on the export's port from the container's
// writable work folder; the root filesystem around it is read-only. The
// shell stays PID 1 of the container and ends on SIGTERM (a PID 1 without
// a handler ignores it, and a stop would wait out the grace period), which
// ends the server with it.
const boxCommand = `mkdir -p www && echo "hello from a container ($(hostname))" > www/index.html || exit 1
trap 'exit 0' TERM
httpd -f -p "$PORT" -h www &
wait`

// containerDemo adds the demo's container templates to acme, "box" and
// "warmbox" (warm: 1), when this machine can run containers: the agent is
// root and the project's pinned runc is built (devstack.RuncBinary). Their image is busybox, built here from
// Debian's busybox-static and served by a registry on the loopback that
// lives as long as the devserver, so the quick start needs no registry of
// its own. It says in one line what it did or why not; stop ends the
// registry.
func containerDemo(ctx context.Context, f *fixture.File, progress io.Writer) (note string, stop func()) {
	stop = func() {}
	if os.Geteuid() != 0 {
		return "Containers:    none (the agent is not root); the process templates are kept", stop
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	// The agent runs the project's pinned runc (it finds the build by
	// itself); the first start builds it.
	if _, err := devstack.RuncBinary(ctx, progress); err != nil {
		return fmt.Sprintf("Containers:    none (the pinned runc %s was not built: %v); the process templates are kept", pinned.Version, firstLine(err)), stop
	}
	img, err := debian.BusyboxImage(ctx)
	if err != nil {
		return fmt.Sprintf("Containers:    none (no busybox image: %v); the process templates are kept", firstLine(err)), stop
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Sprintf("Containers:    none (%v); the process templates are kept", err), stop
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop = func() { _ = srv.Close() }
	ref := ln.Addr().String() + "/demo/busybox:1"
	r, err := name.ParseReference(ref)
	if err == nil {
		err = remote.Write(r, img, remote.WithContext(ctx))
	}
	if err != nil {
		stop()
		return fmt.Sprintf("Containers:    none (the demo image was not served: %v); the process templates are kept", err), func() {}
	}
	for i := range f.Orgs {
		if f.Orgs[i].ID != "acme" {
			continue
		}
		for _, warm := range []int{0, 1} {
			t := domain.Template{
				Name:        "box",
				Description: "busybox's httpd in a container: read-only root, /work writable, memory, CPU and pids limited",
				Command:     []string{"sh", "-c", boxCommand}, Workdir: "/work",
				Runtime: domain.RuntimeContainer, Image: &domain.Image{Ref: ref},
				Exports:   map[string]domain.Export{"web": {Port: 8080}},
				Resources: domain.Resources{CPUs: 1, Memory: "256Mi", PIDs: 128},
				Pools:     []string{"local"}, Restart: "never",
				Timeouts: domain.Timeouts{Idle: domain.Duration(30 * time.Minute), Hard: domain.Duration(6 * time.Hour)},
				Quota:    domain.Quota{MaxLeases: 2},
				Warm:     warm,
			}
			if warm > 0 {
				t.Name, t.Description = "warmbox", "The box, kept warm: the local agent pre-starts one container"
			}
			f.Orgs[i].Templates = append(f.Orgs[i].Templates, t)
		}
	}
	return "Containers:    templates box and warmbox run busybox (image " + ref + ") under runc", stop
}

func firstLine(err error) string {
	s := err.Error()
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}
