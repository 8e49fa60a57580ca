package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/agent/runtimes/container"
	"github.com/envlease/envlease/shared/agent/runtimes/process"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
)

// setupRuntimes makes the runtimes the node offers: process always, and
// container where runc is found (Config.Runc) and the agent runs as root
// with namespaces; noContainer says why not. A -runc the operator named
// that cannot be used is an error.
func (a *Agent) setupRuntimes() error {
	a.runtimes = map[string]runtimes.Runtime{RuntimeProcess: process.New(process.Config{
		Node: a.confinement, WorkDir: a.cfg.WorkDir, Address: a.cfg.Address, BuildCache: a.buildCache, Log: a.log,
	})}
	if a.cfg.Runc == RuntimeNone {
		a.noContainer = errors.New("turned off (-runc none)")
		return nil
	}
	cr, err := container.New(container.Config{
		Node: a.confinement, NoNamespaces: a.noNamespaces, WorkDir: a.cfg.WorkDir, Runc: a.cfg.Runc, BuildCache: a.buildCache,
		ImageCacheDir: a.cfg.ImageCacheDir, ImageCacheBytes: a.cfg.ImageCacheBytes,
		RegistryCredentials: a.cfg.RegistryCredentials, IDBase: a.cfg.ContainerIDBase,
		NoUserNS: a.cfg.ContainerNoUserNS, UIDs: a.cfg.UIDs, Log: a.log,
	})
	if err != nil {
		if a.cfg.Runc != "" && a.confinement.Users != nil && a.confinement.Namespaces {
			return fmt.Errorf("agent: container runtime: %w", err)
		}
		a.noContainer = err
		return nil
	}
	a.runtimes[RuntimeContainer] = cr
	return nil
}

// runtimeNames are the runtimes the node offers, sorted.
func (a *Agent) runtimeNames() []string {
	out := make([]string, 0, len(a.runtimes))
	for n := range a.runtimes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (a *Agent) runtimeText() string { return strings.Join(a.runtimeNames(), ", ") }

// logRuntimes says at start which runtimes the node offers, and in one
// line why not container when it does not.
func (a *Agent) logRuntimes() {
	attrs := []any{"runtimes", a.runtimeNames()}
	if cr, ok := a.runtimes[RuntimeContainer].(interface{ Describe() []any }); ok {
		attrs = append(attrs, cr.Describe()...)
	}
	a.log.Info("runtimes offered", attrs...)
	if a.noContainer != nil {
		a.log.Info("no container runtime: " + a.noContainer.Error())
	}
}

// recoverRuntimes has every runtime remove what an earlier run of the agent
// left, before the node claims anything.
func (a *Agent) recoverRuntimes(ctx context.Context) {
	for _, n := range a.runtimeNames() {
		if _, err := a.runtimes[n].Recover(ctx); err != nil {
			a.log.Warn("what an earlier run left was not all removed", "runtime", n, "err", err)
		}
	}
	// Each runtime removed the disks of what it found; an image left
	// without (a crash as it was made) belongs to no environment now.
	if d := a.confinement.Disks; d != nil {
		if k := d.RemoveLeftDisks(func(string) bool { return false }); k > 0 {
			a.log.Warn("removed disk images an earlier run of the agent left", "images", k)
		}
	}
}

// warmable says whether the node can keep warm environments of t: its
// runtime is offered and it can start without anything a claim brings.
func (a *Agent) warmable(t domain.Template) bool {
	rt, err := a.runtimeFor(t)
	if err != nil {
		return false
	}
	if rt.Name() == RuntimeProcess {
		return len(t.Command) > 0
	}
	if t.Image == nil {
		return false
	}
	if t.Image.Artifact != "" {
		// An image artifact comes with a claim's link: its warm containers
		// start once a lease brought it, from the node's image cache.
		_, ok := a.imageSHAs.Load(t.Image.Artifact)
		return ok
	}
	return t.Image.Ref != ""
}

// warmImageArtifact is the image artifact a warm container of t starts
// from: the one a claim linked before, which the container runtime finds
// unpacked in its cache; if it was evicted since, the warm start fails
// (and backs off) until a lease downloads it again.
func (a *Agent) warmImageArtifact(t domain.Template) *runtimes.ImageArtifact {
	if t.Image == nil || t.Image.Artifact == "" {
		return nil
	}
	sha, ok := a.imageSHAs.Load(t.Image.Artifact)
	if !ok {
		return nil
	}
	return &runtimes.ImageArtifact{SHA256: sha.(string), Fetch: func(context.Context) (string, func(), error) {
		return "", nil, fmt.Errorf("image artifact %s is no longer in the node's cache; the next lease downloads it again", t.Image.Artifact)
	}}
}

// imageArtifact tells the runtime of the image artifact the claim links
// to, which it downloads only if it has not unpacked it before. The
// download is read by its descriptor's path, as it is already unlinked.
func (a *Agent) imageArtifact(c *nodes.Claimed) *runtimes.ImageArtifact {
	if c.Image == nil || c.Template.RuntimeOrDefault() != RuntimeContainer {
		return nil
	}
	link := *c.Image
	if _, known := a.imageSHAs.LoadOrStore(link.ID, link.SHA256); !known && a.warm != nil {
		a.warm.poke() // its template's warm containers may start now
	}
	return &runtimes.ImageArtifact{SHA256: link.SHA256, Fetch: func(ctx context.Context) (string, func(), error) {
		f, err := a.fetch(ctx, &link, "image artifact "+link.ID)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("/proc/self/fd/%d", f.Fd()), func() { f.Close() }, nil
	}}
}

// RuntimeNone as Config.Runc offers no container runtime.
const RuntimeNone = "none"

// RuntimeProcess is the runtime every node offers: the template's command
// as a local process (package runtimes/process). An empty runtime means
// process too.
const RuntimeProcess = domain.RuntimeProcess

// RuntimeContainer runs the template's command in an OCI container under
// runc, from the template's image (package runtimes/container).
const RuntimeContainer = domain.RuntimeContainer

// DefaultContainerIDBase is the first id of the node that a container's
// user namespace maps its ids 0-65535 to (container.DefaultIDBase).
const DefaultContainerIDBase = container.DefaultIDBase

// withAnyPorts is t with no preferred export ports, so each export gets a
// port the node picks.
func withAnyPorts(t domain.Template) domain.Template {
	ex := make(map[string]domain.Export, len(t.Exports))
	for s, e := range t.Exports {
		e.Port = 0
		ex[s] = e
	}
	t.Exports = ex
	return t
}
