//go:build linux

package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/capped"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/execsession"
)

// hogDisk is the disk of the hogs' template: small, so that filling it is
// quick and the tests' own use of the machine's disk stays small, whatever
// the hogs write.
const (
	hogDisk   = "256Mi"
	hogInodes = 256 << 20 / (16 << 10) // confine.BytesPerInode
)

// heapBound pins the test process's Go heap in use (the agent, with the
// API and store it talks to) while environments write gigabytes of output,
// fill their disks and their inodes: what the agent holds of an
// environment's output is its bounded buffers, never the output itself.
const heapBound = 128 << 20

// hogOutput is what each of stdout and stderr of the output hog writes.
const hogOutput = 2 << 30

// The node outlives any environment. A member's script, from a share, run
// in each runtime: one writes several GiB to stdout and to stderr, one fills
// its disk, one creates files until its inodes are gone (a million asked
// for). Meanwhile another environment on the node keeps answering, the node
// keeps claiming, the agent's heap stays under heapBound, and the node
// keeps only a capped tail of the output. Each ends failed with an error
// that says why: the disk ones with out_of_disk.
func TestNodeOutlivesItsEnvironments(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("disks of their own, and the output's bounds, are the root agent's")
	}
	ref := busyboxRef(t)
	snaps := newSnapshots(t)
	share := []domain.TemplateShare{{Name: "src", Path: "/workspace/src", Direction: "in"}}
	run := []string{"sh", "src/run.sh"}
	s := newStackLinks(t, snaps,
		domain.Template{Name: "hog-process", Workdir: "/workspace", Command: run, Shares: share, Resources: domain.Resources{Disk: hogDisk}},
		domain.Template{Name: "hog-container", Runtime: agent.RuntimeContainer, Image: &domain.Image{Ref: ref}, Workdir: "/workspace",
			Command: run, Shares: share, Resources: domain.Resources{Disk: hogDisk}},
		domain.Template{Name: "calm", Command: []string{"sh", "-c", "exec sleep 3600"}},
	)
	snaps.store = s.Store
	s.Clock.Set(time.Now()) // the agent judges exec tickets by the real clock
	work := s.runAgentWith(t, t.TempDir(), 500*time.Millisecond, func(c *agent.Config) { c.Capacity = 8 })

	calm := s.lease(t, "calm")
	s.wait(t, calm, domain.StateReady)

	// The sampler records the peak of the heap and of the output files the
	// node keeps, for the whole test.
	var peakHeap, peakOutput atomic.Uint64
	stop := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			raise(&peakHeap, ms.HeapInuse)
			raise(&peakOutput, outputFilesSize(work))
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()

	scenarios := []struct {
		name, script string
		want         []string // in the environment's error
	}{
		{"several GiB of output", `
			dd if=/dev/zero bs=1M count=` + strconv.Itoa(hogOutput>>20) + ` 2>/dev/null &
			dd if=/dev/zero bs=1M count=` + strconv.Itoa(hogOutput>>20) + ` 2>/dev/null >&2 &
			wait
			echo 'the last line to stderr' >&2
			exit 3`,
			[]string{"exit", "3", "the last line to stderr"}},
		{"a full disk", `
			echo "work: $(dd if=/dev/zero of=big bs=1M 2>&1 | grep -o 'No space left on device' | head -n 1)" >&2
			rm big
			echo "tmp: $(dd if=/dev/zero of=/tmp/big bs=1M 2>&1 | grep -o 'No space left on device' | head -n 1)" >&2
			exit 4`,
			[]string{"out_of_disk", "its disk of", "work: No space left on device", "tmp: No space left on device"}},
		{"a million small files", `
			mkdir many; i=0
			while [ $i -lt 1000000 ] && true > many/$i 2>/dev/null; do i=$((i+1)); done
			echo "made $i files" >&2
			exit 5`,
			[]string{"out_of_disk", "inodes", "made "}},
	}
	for _, rt := range []string{"process", "container"} {
		for _, sc := range scenarios {
			t.Run(rt+"/"+sc.name, func(t *testing.T) {
				art := "art_" + rt + "_" + strings.ReplaceAll(sc.name, " ", "_")
				snaps.addAt(t, art, zst(t, tarOf(t, file("run.sh", sc.script)).Bytes()), "application/x-tar", s.Clock.Now())
				id := s.leaseWithShare(t, "hog-"+rt, art)

				// While it runs: another environment answers, and the node
				// claims and starts a new one.
				assertAnswers(t, s, calm)
				other := s.lease(t, "calm")
				s.wait(t, other, domain.StateReady)
				if r := s.Do("DELETE", "/v1/environments/"+other, apitest.BobToken, nil); r.Status != 200 {
					t.Fatalf("delete: %d %s", r.Status, r.Body)
				}

				env := s.waitLong(t, id, domain.StateFailed)
				for _, w := range sc.want {
					if !strings.Contains(env.Error, w) {
						t.Errorf("the error lacks %q: %q", w, env.Error)
					}
				}
				if sc.name == "a million small files" {
					assertRefusedAtTheBound(t, env.Error)
				}
				assertAnswers(t, s, calm)
			})
		}
	}
	close(stop)
	sampled.Wait()
	t.Logf("peak heap in use %d MiB (bound %d MiB); peak output kept on the node %d KiB", peakHeap.Load()>>20, heapBound>>20, peakOutput.Load()>>10)
	if h := peakHeap.Load(); h > heapBound {
		t.Errorf("the heap in use reached %d MiB, over its bound of %d MiB", h>>20, heapBound>>20)
	}
	// Each environment's output files (stdout.log and stderr.log of a
	// container, .envlease.log of a process, with their older halves): at
	// most two environments' at once here.
	if o := peakOutput.Load(); o > 2*2*capped.DefaultMax {
		t.Errorf("the node kept %d bytes of output files, over the bound", o)
	}
}

// leaseWithShare leases template with its share src from artifact, which
// holds run.sh.
func (s *stack) leaseWithShare(t *testing.T, template, artifact string) string {
	t.Helper()
	r := s.Do("POST", "/v1/environments", apitest.BobToken, map[string]any{
		"template": template, "shares": []map[string]any{{"name": "src", "artifact": artifact, "files": []string{"run.sh"}}},
	})
	if r.Status != 201 {
		t.Fatalf("lease: %d %s", r.Status, r.Body)
	}
	var out struct {
		Environment domain.Environment `json:"environment"`
	}
	r.JSON(t, &out)
	return out.Environment.ID
}

// assertAnswers runs a command in env and checks its answer.
func assertAnswers(t *testing.T, s *stack, env string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	argv := []string{"echo", "alive"}
	s.Clock.Set(time.Now()) // the agent judges tickets by the real clock
	x := s.execTicket(t, env, argv, false)
	var out strings.Builder
	code, err := execsession.Run(ctx, x.URL, x.Ticket, execsession.Options{Command: argv, Stdout: &out})
	if err != nil || code != 0 || out.String() != "alive\n" {
		t.Fatalf("the other environment did not answer: exit %d, %q, %v", code, out.String(), err)
	}
}

// assertRefusedAtTheBound reads "made N files" from the error: the files
// stop at the disk's inodes, less those its folders and files took first.
func assertRefusedAtTheBound(t *testing.T, errText string) {
	t.Helper()
	_, after, ok := strings.Cut(errText, "made ")
	if !ok {
		t.Fatalf("no count of files in %q", errText)
	}
	n, err := strconv.Atoi(strings.Fields(after)[0])
	if err != nil {
		t.Fatal(err)
	}
	if n >= hogInodes || n < hogInodes-64 {
		t.Errorf("made %d files; the disk's inodes are %d, so the refusal came elsewhere than at the bound", n, hogInodes)
	}
}

// outputFilesSize is what the node keeps of environments' output in their
// folders now.
func outputFilesSize(work string) uint64 {
	var n uint64
	for _, pattern := range []string{"containers/*/std*.log*", "envs/*/.envlease.log*"} {
		m, _ := filepath.Glob(filepath.Join(work, pattern))
		for _, p := range m {
			if st, err := os.Lstat(p); err == nil {
				n += uint64(st.Size())
			}
		}
	}
	return n
}

func raise(peak *atomic.Uint64, v uint64) {
	for {
		old := peak.Load()
		if v <= old || peak.CompareAndSwap(old, v) {
			return
		}
	}
}

// Every environment has its own /tmp: what one writes there is in its own
// folder (on its disk), never in the node's /tmp, and the next environment,
// which may be lent the same user id, finds nothing of it.
func TestEveryEnvironmentHasItsOwnTmp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a /tmp of its own needs namespaces (root)")
	}
	mark := "envlease-tmp-mark-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s := newStack(t, domain.Template{Name: "tmp", Command: []string{"sh", "-c",
		`ls -A /tmp /var/tmp > .seen; echo mine > /tmp/` + mark + `; ln -s /etc/shadow /tmp/link; mkdir /tmp/d; exec sleep 3600`}})
	work := s.runAgent(t, 500*time.Millisecond)
	for i := range 3 {
		id := s.lease(t, "tmp")
		s.wait(t, id, domain.StateReady)
		root := filepath.Join(work, "envs", id)
		var seen []byte
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(root, ".tmp", mark)); err == nil {
				seen, _ = os.ReadFile(filepath.Join(root, ".seen"))
				break
			}
		}
		if seen == nil {
			t.Fatalf("environment %d wrote no /tmp/%s into its own folder", i, mark)
		}
		if strings.Contains(string(seen), mark) || strings.Contains(string(seen), "link") {
			t.Fatalf("environment %d found what an earlier one left in /tmp: %q", i, seen)
		}
		if _, err := os.Lstat(filepath.Join("/tmp", mark)); err == nil {
			t.Fatalf("environment %d wrote to the node's /tmp", i)
		}
		if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
			t.Fatalf("delete: %d %s", r.Status, r.Body)
		}
		s.wait(t, id, domain.StateStopped)
	}
}
