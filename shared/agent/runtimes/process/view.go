package process

import (
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

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
	if owner, ok := nodeUsers.owner(); ok && owner != noOwner && owner != strconv.Itoa(b.User.UID) {
		return UserName + "-" + strconv.Itoa(b.User.UID)
	}
	return UserName
}

// nodeUsers is which uid the node's /etc/passwd gives UserName, read again
// only when the file changed: every start and every command asks, and a
// stat costs a tenth of reading and splitting the file.
var nodeUsers = passwdOwner{path: "/etc/passwd"}

type passwdOwner struct {
	path string
	mu   sync.Mutex
	seen fileStamp
	uid  string
	// trusted: seen may stand for the file's content. A read within a
	// second of the file's last change is not kept (as git does with its
	// index): a change in the same tick of a coarse clock would keep the
	// same times.
	trusted bool
}

// fileStamp is what tells a changed file: its inode, size, and modify and
// change times (the change time cannot be set back, as utimes can the
// modify time).
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

// noOwner: /etc/passwd gives UserName to nobody.
const noOwner = ""

// owner is UserName's uid field in /etc/passwd (noOwner when it names
// none); ok is false when the file cannot be read.
func (p *passwdOwner) owner() (string, bool) {
	fi, err := os.Stat(p.path)
	if err != nil {
		return noOwner, false
	}
	st := stampOf(fi)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.trusted && p.seen == st {
		return p.uid, true
	}
	readAt := time.Now()
	passwd, err := os.ReadFile(p.path)
	if err != nil {
		return noOwner, false
	}
	uid := noOwner
	for _, line := range strings.Split(string(passwd), "\n") {
		if f := strings.Split(line, ":"); len(f) > 2 && f[0] == UserName {
			uid = f[2]
			break
		}
	}
	changed := max(st.mtime, st.ctime)
	p.seen, p.uid, p.trusted = st, uid, readAt.UnixNano()-changed > int64(time.Second)
	return uid, true
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
