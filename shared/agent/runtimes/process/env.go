package process

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
)

// fallbackPath is the search path when the agent has none.
const fallbackPath = "/usr/local/bin:/usr/bin:/bin"

// processEnv is the whole environment of an environment's command, and
// nothing of the agent's own but its search path:
//
//	PATH          the agent's (folders the environment's user cannot
//	              search left out), else /usr/local/bin:/usr/bin:/bin
//	HOME          the environment's folder
//	USER, LOGNAME its user's name (userName), when it has a user of its own
//	HTTP_PROXY, HTTPS_PROXY, http_proxy, https_proxy, ALL_PROXY, NO_PROXY,
//	no_proxy      an egress environment's proxy (egressEnv), when egress > 0
//	<template env> the template's env, which may override all the above
//	ENVLEASE_ROOT the environment's folder
//	ENVLEASE_CACHE its build cache's folder, with buildCache
//	PORT, EXPORT_<SERVICE>_PORT the exports' ports
//	SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE,
//	GIT_SSL_CAINFO the roots with the environment's CA (caBundlePath), when
//	              its template binds secrets
func (rt *Runtime) processEnv(t domain.Template, b *confine.Box, services []string, ports map[string]int, egress int, cache string) []string {
	env := []string{"PATH=" + rt.searchPath(b), "HOME=" + b.Root}
	if name := userName(b); name != "" {
		env = append(env, "USER="+name, "LOGNAME="+name)
	}
	if egress > 0 {
		for _, kv := range confine.EgressEnv(egress) {
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
	env = append(env, "ENVLEASE_ROOT="+b.Root)
	if len(t.Secrets) > 0 && t.Transparent() {
		env = append(env, runtimes.TrustEnv(caBundlePath(b))...)
	}
	if cache != "" {
		env = append(env, runtimes.CacheEnv+"="+cache)
	}
	for i, s := range services {
		if i == 0 {
			env = append(env, "PORT="+strconv.Itoa(ports[s]))
		}
		env = append(env, runtimes.PortEnv(s)+"="+strconv.Itoa(ports[s]))
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
func (rt *Runtime) searchPath(b *confine.Box) string {
	if b.User == nil {
		return agentPath(false)
	}
	// Confined, each folder of the PATH and every folder above it is
	// looked at (tens of system calls), which every start and every exec
	// would repeat: the answer is kept for a few seconds, so a folder whose
	// permissions change counts from the next look.
	rt.pathMu.Lock()
	defer rt.pathMu.Unlock()
	if now := time.Now(); rt.confinedPath == "" || now.Sub(rt.confinedPathAt) > confinedPathTTL {
		rt.confinedPath, rt.confinedPathAt = agentPath(true), now
	}
	return rt.confinedPath
}

// confinedPathTTL is how long searchPath keeps a confined user's PATH.
const confinedPathTTL = 5 * time.Second

// agentPath is the agent's PATH reduced to absolute entries and, for a
// confined user, to the folders others may search.
func agentPath(confined bool) string {
	p := os.Getenv("PATH")
	if p == "" {
		return fallbackPath
	}
	var keep []string
	for _, dir := range filepath.SplitList(p) {
		if !filepath.IsAbs(dir) || confined && !othersCanSearch(dir) {
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
func lookPath(name, path string, b *confine.Box) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		if b.User == nil && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
		if b.User != nil && st.Mode().Perm()&0o001 != 0 && othersCanReach(p) {
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

// caBundlePath is where an environment whose template binds secrets finds
// the roots with its own CA: a file of its folder, written before its
// command starts (writeCABundle).
func caBundlePath(b *confine.Box) string {
	return filepath.Join(b.Root, ".envlease", "ca-certificates.crt")
}

// writeCABundle writes the roots with the environment's CA where
// caBundlePath says, readable by the environment; nothing without a CA.
func writeCABundle(b *confine.Box, ca []byte) error {
	if len(ca) == 0 {
		return nil
	}
	p := caBundlePath(b)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, runtimes.CABundle(nil, ca), 0o644)
}
