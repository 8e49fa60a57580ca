//go:build linux

package container

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
)

// A shell as the command ends on SIGTERM, as the init is PID 1 and not
// the shell: the container exits with 128+SIGTERM from the stop's SIGTERM,
// not killed by the SIGKILL that follows the grace.
func TestContainerInitEndsAShellOnSIGTERM(t *testing.T) {
	_, ref := setup(t)
	r := newRuntime(t, 1<<30)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := r.Prepare(ctx, runtimes.Env{ID: "init-term", Template: domain.Template{
		Name: "sleep", Runtime: domain.RuntimeContainer, Image: &domain.Image{Ref: ref}, Command: []string{"sh", "-c", "sleep 1000"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Remove()
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The grace is long: a stop that needed the SIGKILL would show as
	// killed, whatever the time it took.
	h.Stop(time.Minute)
	if err := h.Err(); !strings.Contains(err.Error(), "exit 143") {
		t.Errorf("the container ended %v, want exit 143 (its command ended by SIGTERM)", err)
	}
}

// Orphans the command leaves are reaped by the init: once they ended, no
// zombie of theirs is left in the container. The command's last program
// (sleep, after exec) reaps nothing; a checker in the background waits for
// the orphans to be gone, writes what it found and ends it.
func TestContainerInitReapsOrphans(t *testing.T) {
	_, ref := setup(t)
	r := newRuntime(t, 1<<30)
	out := run(t, r, "init-reap", "acme", domain.Template{
		Name: "orphans", Runtime: domain.RuntimeContainer, Image: &domain.Image{Ref: ref}, Workdir: "/work",
		Command: []string{"sh", "-c", `p=$$
(sleep 0.1 &); (sleep 0.1 &); (sleep 0.1 &)
others() {
	n=0
	for s in /proc/[0-9]*/status; do
		[ "$s" != /proc/$p/status ] && grep -q '^Name:.*sleep' $s 2>/dev/null && n=$((n+1))
	done
	echo $n
}
(i=0
while [ $i -lt 600 ] && [ "$(others)" -ne 0 ]; do i=$((i+1)); sleep 0.1; done
echo "left: $(others)" > /work/out
kill $p) &
exec sleep 1000`},
	})
	if out != "left: 0\n" {
		t.Errorf("orphans of the command: %q, want none left (reaped)", out)
	}
}
