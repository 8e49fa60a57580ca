package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/envlease/envlease/shared/agent/confine"
)

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
				mine := confine.OwnedBy(st, os.Geteuid())
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
