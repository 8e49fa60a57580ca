package agent

import (
	"path/filepath"

	"github.com/envlease/envlease/shared/agent/buildcache"
)

// openBuildCache opens the build caches of templates with buildCache,
// which every runtime is given (default <WorkDir>/caches).
func (a *Agent) openBuildCache() error {
	dir := a.cfg.BuildCacheDir
	if dir == "" {
		dir = filepath.Join(a.cfg.WorkDir, "caches")
	}
	c, err := buildcache.Open(buildcache.Options{Dir: dir, MaxBytes: a.cfg.BuildCacheBytes, Log: a.log})
	if err != nil {
		return err
	}
	a.buildCache = c
	return nil
}

// organization is the node's organization, once it registered.
func (a *Agent) organization() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.org
}
