package confine

import (
	"fmt"
	"strconv"
	"strings"
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

// Check says why r cannot be the range of environments' user ids, or nil.
func (r UIDRange) Check() error {
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
	return r, r.Check()
}
