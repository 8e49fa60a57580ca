package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/envlease/envlease/shared/domain"
)

// UIDRange is a range of user ids, First to Last inclusive. When the agent
// runs as root each environment runs as one of them, its group id the same
// number. Nothing else on the node may use them: a stop kills every process
// of the environment's user.
type UIDRange struct{ First, Last uint32 }

// DefaultUIDRange lies above the ids useradd hands out (up to 60000) and
// the 16-bit ones (nobody is 65534).
var DefaultUIDRange = UIDRange{First: 200000, Last: 299999}

func (r UIDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

func (r UIDRange) size() uint64 { return uint64(r.Last) - uint64(r.First) + 1 }

func (r UIDRange) check() error {
	switch {
	case r.First > r.Last:
		return fmt.Errorf("uid range %s: the first id is above the last", r)
	case r.First < 1000:
		// System users (and root) run daemons the node needs; killing every
		// process of one at a stop would take them down.
		return fmt.Errorf("uid range %s: ids below 1000 belong to system users", r)
	case r.First <= 65534 && 65534 <= r.Last:
		return fmt.Errorf("uid range %s: it holds 65534 (nobody), which daemons run as", r)
	case r.Last == 1<<32-1:
		return fmt.Errorf("uid range %s: %d means no id to the kernel", r, r.Last)
	}
	return nil
}

// ParseUIDRange reads "FIRST-LAST" (as -uid-range takes it).
func ParseUIDRange(s string) (UIDRange, error) {
	first, last, ok := strings.Cut(strings.TrimSpace(s), "-")
	f, err1 := strconv.ParseUint(first, 10, 32)
	l, err2 := strconv.ParseUint(last, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return UIDRange{}, fmt.Errorf("uid range %q: want FIRST-LAST, such as %s", s, DefaultUIDRange)
	}
	r := UIDRange{First: uint32(f), Last: uint32(l)}
	return r, r.check()
}

// ReadCredentialFile reads a node credential from a file only its owner can
// read or write (mode 0600 or 0400). A credential in the agent's arguments
// would be in every user's process list, and one in its environment is
// readable through /proc by whatever runs as its user.
func ReadCredentialFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("credential file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("credential file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("credential file %s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("credential file %s has mode %04o: group or others may read or change it; make it the agent's alone (chmod 600 %s)", path, perm, path)
	}
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if err != nil && n == 0 {
		return "", fmt.Errorf("credential file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b[:n]))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("credential file %s must hold one node credential (els_node_…) and nothing else", path)
	}
	return tok, nil
}

// box is what holds one environment on the node: its folder (the root)
// and, when the agent runs as root, a user of its own; where the node has a
// writable cgroup v2 tree, a cgroup of its own.
type box struct {
	root   string
	user   *envUser // nil: the agent's own user
	cgroup string   // the cgroup's folder, "" for none
	once   sync.Once
}

// envUser is a user id lent to one environment, held (against other agents
// on the node too) until its folder is gone.
type envUser struct {
	uid     int
	release func()
}

func (b *box) owner() *Owner {
	if b == nil || b.user == nil {
		return nil
	}
	return &Owner{UID: b.user.uid, GID: b.user.uid}
}

// newBox creates an environment's folder, 0700 and owned by a user lent to
// it when the agent runs as root, and its cgroup where it can.
func (a *Agent) newBox(root string) (*box, error) {
	b := &box{root: root}
	if a.users != nil {
		u, err := a.users.take()
		if err != nil {
			return nil, err
		}
		b.user = u
	}
	if err := os.Mkdir(root, 0o700); err != nil {
		a.releaseBox(b)
		return nil, fmt.Errorf("create the environment's folder: %w", err)
	}
	if b.user != nil {
		// envs/ is the agent's and only it creates there, so the folder just
		// made is the one handed over.
		if err := os.Lchown(root, b.user.uid, b.user.uid); err != nil {
			a.cleanup(b)
			return nil, fmt.Errorf("give the environment's folder to its user: %w", err)
		}
	}
	if a.cgroups != "" {
		dir := filepath.Join(a.cgroups, "envlease-"+filepath.Base(root))
		if err := os.Mkdir(dir, 0o755); err != nil {
			a.log.Warn("no cgroup for the environment; a stop kills its processes by user or process group instead", "root", root, "err", err)
		} else {
			b.cgroup = dir
		}
	}
	return b, nil
}

// cleanup removes an environment's folder (unless KeepRoots) and its
// cgroup, and gives its user id back. Its processes are gone by then.
func (a *Agent) cleanup(b *box) {
	if b == nil {
		return
	}
	b.once.Do(func() {
		if !a.cfg.KeepRoots {
			_ = os.RemoveAll(b.root)
		}
		a.releaseBox(b)
	})
}

func (a *Agent) releaseBox(b *box) {
	if b.cgroup != "" {
		if err := removeCgroup(b.cgroup); err != nil {
			a.log.Warn("cgroup not removed", "cgroup", b.cgroup, "err", err)
		}
	}
	if b.user != nil {
		b.user.release()
	}
}

// mkdirIn creates the folder rel inside the box's root, through os.Root (a
// link in the folder, from a snapshot, cannot lead the agent elsewhere), each
// created folder owned by the environment's user.
func (b *box) mkdirIn(rel string) error {
	root, err := os.OpenRoot(b.root)
	if err != nil {
		return err
	}
	defer root.Close()
	return unpacker{root: root, owner: b.owner()}.mkdirAll(rel)
}

// openLog opens the environment's log, <root>/.envlease.log, for appending:
// one a snapshot brought is kept if it is a regular file, anything else of
// that name is replaced, and it is never followed out of the folder.
func (b *box) openLog() (*os.File, error) {
	root, err := os.OpenRoot(b.root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	const name = ".envlease.log"
	if st, err := root.Lstat(name); err == nil && !st.Mode().IsRegular() {
		if err := root.RemoveAll(name); err != nil {
			return nil, err
		}
	}
	f, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if o := b.owner(); o != nil {
		if err := f.Chown(o.UID, o.GID); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// fallbackPath is the search path when the agent has none.
const fallbackPath = "/usr/local/bin:/usr/bin:/bin"

// processEnv is the whole environment of an environment's command, and
// nothing of the agent's own but its search path:
//
//	PATH          the agent's (folders the environment's user cannot
//	              search left out), else /usr/local/bin:/usr/bin:/bin
//	HOME          the environment's folder
//	HTTP_PROXY, HTTPS_PROXY, http_proxy, https_proxy, ALL_PROXY, NO_PROXY,
//	no_proxy      an egress environment's proxy (egressEnv), when egress > 0
//	<template env> the template's env, which may override all the above
//	ENVLEASE_ROOT the environment's folder
//	PORT, EXPORT_<SERVICE>_PORT the exports' ports
func (a *Agent) processEnv(t domain.Template, b *box, services []string, ports map[string]int, egress int) []string {
	env := []string{"PATH=" + a.searchPath(b), "HOME=" + b.root}
	if egress > 0 {
		for _, kv := range egressEnv(egress) {
			// The template's own value wins; one of each name only, as the
			// init hands the list to execve as is.
			if k, _, _ := strings.Cut(kv, "="); !hasKey(t.Env, k) {
				env = append(env, kv)
			}
		}
	}
	keys := make([]string, 0, len(t.Env))
	for k := range t.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+t.Env[k])
	}
	env = append(env, "ENVLEASE_ROOT="+b.root)
	for i, s := range services {
		if i == 0 {
			env = append(env, "PORT="+strconv.Itoa(ports[s]))
		}
		env = append(env, portEnv(s)+"="+strconv.Itoa(ports[s]))
	}
	return env
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// searchPath is the PATH an environment gets: the agent's absolute entries,
// without those its user could not search (root's PATH often starts in
// /root, which others cannot enter).
func (a *Agent) searchPath(b *box) string {
	p := os.Getenv("PATH")
	if p == "" {
		return fallbackPath
	}
	var keep []string
	for _, dir := range filepath.SplitList(p) {
		if !filepath.IsAbs(dir) || b.user != nil && !othersCanSearch(dir) {
			continue
		}
		keep = append(keep, dir)
	}
	if len(keep) == 0 {
		return fallbackPath
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

// lookPath resolves a command's name as the environment's user would, in
// the PATH it gets: exec.LookPath would search the agent's PATH, whose first
// match may be one the environment's user cannot run.
func lookPath(name, path string, b *box) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		if b.user == nil && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
		if b.user != nil && st.Mode().Perm()&0o001 != 0 && othersCanReach(p) {
			return p, nil
		}
	}
	return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
}

// othersCanSearch says whether a user that owns nothing on the way (an
// environment's) can enter dir: it and every folder above it, as written
// and with links resolved, let others search them.
func othersCanSearch(dir string) bool {
	st, err := os.Stat(dir)
	return err == nil && st.IsDir() && othersCanReach(dir)
}

// othersCanReach says whether the folders above p let others search them.
func othersCanReach(p string) bool {
	paths := []string{p}
	if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
		paths = append(paths, real)
	}
	for _, q := range paths {
		for d := filepath.Dir(q); ; d = filepath.Dir(d) {
			st, err := os.Stat(d)
			if err != nil || st.Mode().Perm()&0o001 == 0 {
				return false
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	return true
}

// searchableByOthers makes the folders on the way to envs/ searchable by
// environments' users: envs/ becomes 0711 (no listing) and the work dir
// gains o+x. So may folders above it that are temporary ones (under the
// temporary folder, where os.MkdirTemp makes them 0700) and the agent's own;
// any other folder on the way that others cannot search is an error, as
// opening it up is the operator's call.
func (a *Agent) searchableByOthers() error {
	envs := filepath.Join(a.cfg.WorkDir, "envs")
	if err := os.Chmod(envs, 0o711); err != nil {
		return err
	}
	tmp := os.TempDir()
	if real, err := filepath.EvalSymlinks(tmp); err == nil {
		tmp = real
	}
	ways := []string{a.cfg.WorkDir}
	if real, err := filepath.EvalSymlinks(a.cfg.WorkDir); err == nil && real != a.cfg.WorkDir {
		ways = append(ways, real)
	}
	for _, w := range ways {
		for d := w; ; d = filepath.Dir(d) {
			st, err := os.Stat(d)
			if err != nil {
				return err
			}
			if mode := st.Mode().Perm(); mode&0o001 == 0 {
				mine := ownedBy(st, os.Geteuid())
				if !(mine && (d == w || strings.HasPrefix(d, tmp+string(filepath.Separator)))) {
					return fmt.Errorf("agent: environments run as users of their own and must reach %s, but %s (mode %04o) does not let others search it: give it o+x, or choose a -workdir under folders that do", envs, d, mode)
				}
				if err := os.Chmod(d, mode|0o001); err != nil {
					return err
				}
				a.log.Info("let others search a folder on the way to the environments' folders (o+x)", "folder", d)
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	return nil
}

var errNoCgroup = errors.New("no cgroup v2 tree the agent may write")
