package runc

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/envlease/envlease/shared/domain"
)

// FromTemplate gives the Config of environment id of template t run from an
// image whose config is img. The template wins over the image: its command
// over the image's entrypoint and cmd, its env over the image's (key by
// key), its workdir over the image's working folder (a relative workdir is
// taken from /). A container's root is read-only but for the template's
// writable paths, its share paths and its work folder. memoryBytes is the
// template's memory parsed by the agent. The image's user is taken when it
// is numeric ("uid" or "uid:gid"); a user by name is an error, as the agent
// does not read the image's /etc/passwd. The caller adds what the node
// decides: NetNS, UserNS, Mounts, Tmpfs.
func FromTemplate(id string, t domain.Template, img v1.Config, memoryBytes int64) (Config, error) {
	args := append([]string(nil), t.Command...)
	if len(args) == 0 {
		args = append(append(args, img.Entrypoint...), img.Cmd...)
	}
	env := map[string]string{}
	var order []string
	for _, e := range img.Env {
		k, v, _ := strings.Cut(e, "=")
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	var extra []string
	for k := range t.Env {
		if _, ok := env[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for k, v := range t.Env {
		env[k] = v
	}
	var envList []string
	for _, k := range append(order, extra...) {
		envList = append(envList, k+"="+env[k])
	}
	cwd := t.Workdir
	if cwd == "" {
		cwd = img.WorkingDir
	}
	if cwd != "" {
		cwd = path.Clean("/" + cwd)
	}
	writable := append([]string(nil), t.Writable...)
	for _, s := range t.Shares {
		if s.Path == "" {
			continue
		}
		if strings.HasPrefix(s.Path, "/") {
			writable = append(writable, s.Path)
		} else {
			writable = append(writable, path.Join("/", cwd, s.Path))
		}
	}
	if cwd != "" && cwd != "/" {
		writable = append(writable, cwd)
	}
	c := Config{
		ID:       id,
		ReadOnly: true,
		Writable: writable,
		Args:     args,
		Env:      envList,
		Cwd:      cwd,
		Resources: Resources{
			MemoryBytes: memoryBytes,
			Pids:        int64(t.Resources.PIDs),
			CPUs:        float64(t.Resources.CPUs),
		},
	}
	if img.User != "" {
		u, g, hasGroup := strings.Cut(img.User, ":")
		uid, err := strconv.ParseUint(u, 10, 32)
		if err != nil {
			return Config{}, fmt.Errorf("the image's user %q: only numeric users are supported", img.User)
		}
		gid := uid
		if hasGroup {
			if gid, err = strconv.ParseUint(g, 10, 32); err != nil {
				return Config{}, fmt.Errorf("the image's user %q: only numeric groups are supported", img.User)
			}
		}
		c.UID, c.GID = uint32(uid), uint32(gid)
	}
	if len(c.Args) == 0 {
		return Config{}, fmt.Errorf("template %s: no command, and the image names none", t.Name)
	}
	return c, nil
}
