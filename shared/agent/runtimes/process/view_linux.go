//go:build linux

package process

import (
	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/nsinit"
	"github.com/envlease/envlease/shared/domain"
)

// view is how an environment in namespaces of its own looks from inside:
// its user named (userName) in the passwd and group files it sees, and its
// workdir at the template's path, bound there from its folder on the node
// (nsinit.View).
func view(t domain.Template, b *confine.Box) *nsinit.View {
	name := userName(b)
	v := &nsinit.View{User: name, Group: name, Home: b.Root, Workdir: templateWorkdir(t)}
	if v.User == "" && v.Workdir == "" {
		return nil
	}
	return v
}
