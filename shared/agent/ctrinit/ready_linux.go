//go:build linux

package ctrinit

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// ReadyName is the name (comm) the init takes once it forwards signals to
// the command; readyComm is it as the NUL-ended bytes prctl takes.
const ReadyName = "envlease-init"

var readyComm = append([]byte(ReadyName), 0)

// WaitReady waits, at most max, until the init of pid (as the node sees
// it) forwards signals: a stop's SIGTERM sent earlier, while the init's Go
// runtime starts, would end the container with status 2 rather than end
// its command. It returns at once when pid is no longer there.
func WaitReady(pid int, max time.Duration) bool {
	comm := "/proc/" + strconv.Itoa(pid) + "/comm"
	deadline := time.Now().Add(max)
	for {
		b, err := os.ReadFile(comm)
		if err != nil {
			return false
		}
		if strings.TrimSpace(string(b)) == ReadyName {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
}
