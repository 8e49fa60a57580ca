package process

import (
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/domain"
)

// UserName is the name an environment's user has inside it (whoami, the
// shell's prompt, ls -l), when the agent runs as root and lends it a uid of
// its own: "envlease", or "envlease-<uid>" on a node whose /etc/passwd
// gives "envlease" to another uid.
const UserName = "envlease"

// userName is the name of the environment's user, "" for the agent's own.
func userName(b *confine.Box) string {
	if b.User == nil {
		return ""
	}
	if passwd, err := os.ReadFile("/etc/passwd"); err == nil {
		for _, line := range strings.Split(string(passwd), "\n") {
			f := strings.Split(line, ":")
			if len(f) > 2 && f[0] == UserName && f[2] != strconv.Itoa(b.User.UID) {
				return UserName + "-" + strconv.Itoa(b.User.UID)
			}
		}
	}
	return UserName
}

// templateWorkdir is the template's workdir when it is an absolute path
// (the path a container works at), else "": a relative one ("work") names
// a folder inside the environment's, and stays there.
func templateWorkdir(t domain.Template) string {
	if !strings.HasPrefix(t.Workdir, "/") {
		return ""
	}
	p := path.Clean("/" + t.Workdir)
	if p == "/" {
		return ""
	}
	return p
}
