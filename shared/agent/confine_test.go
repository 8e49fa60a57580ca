package agent_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"log/slog"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// nodeTempDir is a temporary folder of the node that environments reach
// at its path: in namespaces of their own (as root) the node's /tmp is not
// theirs, so it is made under /run instead.
func nodeTempDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return t.TempDir()
	}
	d, err := os.MkdirTemp("/run", "envlease-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// writableByAll creates file for anyone to append to, on a way anyone may
// search (the test's temporary folders are 0700).
func writableByAll(t *testing.T, file string) {
	t.Helper()
	if err := os.WriteFile(file, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o666); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Dir(file); strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, st.Mode().Perm()|0o001); err != nil {
			t.Fatal(err)
		}
	}
}

// lockedBuffer collects an agent's log lines for a test to read while the
// agent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the log records at level whose message contains msg.
func (b *lockedBuffer) records(level, msg string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(b.buf.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if rec["level"] == level && strings.Contains(rec["msg"].(string), msg) {
			out = append(out, rec)
		}
	}
	return out
}

// procStat is what a test reads of /proc/<pid>: its state, session and
// real user id; ok is false once it is gone.
type procStat struct {
	state         string
	ppid, session int
	uid           int
}

func readProc(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// pid (comm) state ppid pgrp session ...; comm may hold spaces.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	st := procStat{state: f[0], uid: -1}
	st.ppid, _ = strconv.Atoi(f[1])
	st.session, _ = strconv.Atoi(f[3])
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procStat{}, false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			st.uid, _ = strconv.Atoi(strings.Fields(v)[0])
		}
	}
	return st, true
}

// running says whether pid is a live process: a zombie (killed, waiting for
// a parent that may never reap it) is not.
func running(pid int) bool {
	st, ok := readProc(pid)
	return ok && st.state != "Z" && st.state != "X"
}

// processesOf lists the live processes whose real user is uid.
func processesOf(uid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProc(pid); ok && st.uid == uid && running(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// hostPid is the node's pid of the process whose pid is nspid in the PID
// namespace ns ("pid:[inode]"); nspid itself when ns is the node's own.
func hostPid(t *testing.T, ns string, nspid int) int {
	t.Helper()
	if own, _ := os.Readlink("/proc/self/ns/pid"); ns == "" || ns == own {
		return nspid
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, _ := os.Readlink("/proc/" + e.Name() + "/ns/pid"); l != ns {
			continue
		}
		status, _ := os.ReadFile("/proc/" + e.Name() + "/status")
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				if f := strings.Fields(v); len(f) > 0 && f[len(f)-1] == strconv.Itoa(nspid) {
					return pid
				}
			}
		}
	}
	t.Fatalf("no process %d in PID namespace %s", nspid, ns)
	return 0
}

// readInt waits for a number the environment's command writes to file.
func readInt(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(file)
		if s := strings.TrimSpace(string(b)); strings.HasSuffix(string(b), "\n") && s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("%s: %q", file, b)
			}
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not written", file)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// confinedScript writes who it runs as and what environment it got, then
// starts a child in a session of its own (setsid) that backgrounds a sleep,
// and listens on its export's port.
const confinedScript = `id -G > groups
readlink /proc/self/ns/pid > pidns
env > env.txt
echo $$ > pid
id -u > uid.tmp && mv uid.tmp uid
setsid sh -c 'sleep 3600 & echo $! > bgpid.tmp; mv bgpid.tmp bgpid; wait' &
exec python3 -c '
import os, socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(os.environ["PORT"]))); s.listen(8)
time.sleep(3600)'`

// As root, an environment runs as a user of its own from the range, in a
// folder (and with a log) only that user can enter, with none of the
// agent's environment variables; a stop ends every process of that user,
// a child that left the process group and the session among them. With a
// writable cgroup tree the stop goes through cgroup.kill, without one
// through the user's processes in /proc: both are run, outside namespaces;
// in namespaces of its own (the default as root) the same holds, and the
// template's port 80 is the environment's own to bind.
func TestConfinedEnvironment(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("environments get users of their own only when the agent runs as root on Linux")
	}
	for _, mode := range []string{"cgroup", "users", "namespaces"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "cgroup" && !agent.CgroupsWritable() {
				t.Skip("this node has no cgroup v2 tree the agent may write")
			}
			marker := "agent-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			t.Setenv("AGENT_SECRET_MARKER", marker)
			s := newStack(t, domain.Template{
				Name: "confined", Command: []string{"sh", "-c", confinedScript},
				Env: map[string]string{"GREETING": "hi"}, Exports: map[string]domain.Export{"api": {Port: 80}},
			})
			logs := &lockedBuffer{}
			dir := s.runAgentWith(t, t.TempDir(), 300*time.Millisecond, func(c *agent.Config) {
				c.Log = slog.New(slog.NewJSONHandler(logs, nil))
				if mode == "users" {
					agent.WithoutCgroups(c)
				}
				if mode != "namespaces" {
					agent.WithoutNamespaces(c)
				}
			})
			first, second := s.lease(t, "confined"), s.lease(t, "confined")
			s.wait(t, first, domain.StateReady)
			s.wait(t, second, domain.StateReady)
			root := filepath.Join(dir, "envs", first)
			uid := readInt(t, filepath.Join(root, "uid"))
			// In a PID namespace the script's pids are the namespace's.
			pidns, _ := os.ReadFile(filepath.Join(root, "pidns"))
			bg := hostPid(t, strings.TrimSpace(string(pidns)), readInt(t, filepath.Join(root, "bgpid")))
			t.Cleanup(func() {
				// Only if the agent failed to: the processes this test started.
				for _, pid := range processesOf(uid) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			if other := readInt(t, filepath.Join(dir, "envs", second, "uid")); other == uid {
				t.Fatalf("two environments run as the same user %d", uid)
			}
			if r := agent.DefaultUIDRange; uid < int(r.First) || uid > int(r.Last) {
				t.Fatalf("the environment runs as uid %d, outside %s", uid, r)
			}
			if groups, _ := os.ReadFile(filepath.Join(root, "groups")); strings.TrimSpace(string(groups)) != strconv.Itoa(uid) {
				t.Fatalf("groups %q, want only its own group %d", groups, uid)
			}
			for name, want := range map[string]os.FileMode{"": 0o700, ".envlease.log": 0o600} {
				st, err := os.Stat(filepath.Join(root, name))
				if err != nil {
					t.Fatal(err)
				}
				if owner := int(st.Sys().(*syscall.Stat_t).Uid); st.Mode().Perm() != want || owner != uid {
					t.Fatalf("%s/%s: mode %04o owner %d, want %04o owned by %d", root, name, st.Mode().Perm(), owner, want, uid)
				}
			}

			env, err := os.ReadFile(filepath.Join(root, "env.txt"))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(string(env)), "\n") {
				k, v, _ := strings.Cut(line, "=")
				got[k] = v
			}
			if strings.Contains(string(env), marker) {
				t.Fatalf("the agent's environment reached the environment's command:\n%s", env)
			}
			for _, kv := range os.Environ() {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "PATH", "HOME", "PWD", "OLDPWD", "SHLVL", "_":
					continue
				}
				// Present with the agent's value: a variable absent from the
				// command's environment has reached nothing, even if empty.
				if gv, ok := got[k]; ok && gv == v {
					t.Errorf("the agent's %s reached the environment's command", k)
				}
			}
			port, _ := strconv.Atoi(got["PORT"])
			if got["GREETING"] != "hi" || got["HOME"] != root || got["ENVLEASE_ROOT"] != root || got["PATH"] == "" ||
				got["EXPORT_API_PORT"] != got["PORT"] {
				t.Fatalf("the documented variables are not all there:\n%s", env)
			}
			// Ready means the command bound it, as the environment's user.
			if mode == "namespaces" && port != 80 {
				t.Fatalf("PORT %d: in a network namespace of its own the template's port 80 is the environment's", port)
			}
			if mode != "namespaces" && port < 1024 {
				t.Fatalf("PORT %d: a port below 1024 cannot be bound by the environment's user on the node", port)
			}

			if mode == "cgroup" {
				cg, _ := os.ReadFile("/proc/" + strconv.Itoa(bg) + "/cgroup")
				if !strings.Contains(string(cg), "/envlease-"+first+"\n") {
					t.Fatalf("the environment's process is not in its cgroup: %s", cg)
				}
			}
			bgStat, ok := readProc(bg)
			if !ok || bgStat.uid != uid {
				t.Fatalf("the background sleep %d: %+v %v", bg, bgStat, ok)
			}
			setsidShell := bgStat.ppid
			main, _ := readProc(hostPid(t, strings.TrimSpace(string(pidns)), readInt(t, filepath.Join(root, "pid"))))
			if bgStat.session != setsidShell || main.session == setsidShell {
				t.Fatalf("the child did not get a session of its own: the sleep %+v, the command %+v", bgStat, main)
			}
			if r := s.Do("DELETE", "/v1/environments/"+first, apitest.BobToken, nil); r.Status != 200 {
				t.Fatalf("delete: %d", r.Status)
			}
			s.wait(t, first, domain.StateStopped)
			// Stopped is reported once the environment is over on the node.
			for _, pid := range []int{bg, setsidShell} {
				if running(pid) {
					t.Errorf("process %d of the stopped environment still runs", pid)
				}
			}
			if left := processesOf(uid); len(left) > 0 {
				t.Errorf("processes of user %d left after the stop: %v", uid, left)
			}
			if _, err := os.Stat(root); !os.IsNotExist(err) {
				t.Errorf("the folder is left: %v", err)
			}
			if w := logs.records("WARN", "not confined"); len(w) > 0 {
				t.Errorf("an agent that runs as root warned: %v", w)
			}
			if i := logs.records("INFO", "environments are confined"); len(i) != 1 {
				t.Errorf("start records on confinement: %v", i)
			}
			ns, shared := logs.records("INFO", "namespaces of their own"), logs.records("WARN", "share the node's network")
			if mode == "namespaces" && (len(ns) != 1 || len(shared) != 0) || mode != "namespaces" && (len(ns) != 0 || len(shared) != 1) {
				t.Errorf("start records on namespaces: %v %v", ns, shared)
			}
		})
	}
}

// An agent that is not root says so at start, in one warning naming what is
// then not confined, and runs environments as before, as its own user; the
// environment still gets only its documented variables.
func TestNotRootWarnsAndRuns(t *testing.T) {
	marker := "agent-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Setenv("AGENT_SECRET_MARKER", marker)
	s := newStack(t, domain.Template{
		Name: "plain", Command: []string{"sh", "-c", `env > env.tmp && mv env.tmp env.txt; id -u > uid.tmp && mv uid.tmp uid; exec sleep 3600`},
	})
	logs := &lockedBuffer{}
	dir := s.runAgentWith(t, t.TempDir(), 300*time.Millisecond, func(c *agent.Config) {
		c.Log = slog.New(slog.NewJSONHandler(logs, nil))
		agent.AsNotRoot(c)
	})
	id := s.lease(t, "plain")
	s.wait(t, id, domain.StateReady)
	root := filepath.Join(dir, "envs", id)
	if uid := readInt(t, filepath.Join(root, "uid")); uid != os.Geteuid() {
		t.Fatalf("the environment runs as %d, want the agent's user %d", uid, os.Geteuid())
	}
	env, _ := os.ReadFile(filepath.Join(root, "env.txt"))
	if strings.Contains(string(env), marker) || !strings.Contains(string(env), "ENVLEASE_ROOT="+root+"\n") {
		t.Fatalf("environment of the command:\n%s", env)
	}
	warns := logs.records("WARN", "environments are not confined")
	if len(warns) != 1 {
		t.Fatalf("warnings on confinement: %v", warns)
	}
	for _, what := range []string{"agent's user", "credential", "other environments' folders and logs", "signal"} {
		if !strings.Contains(warns[0]["msg"].(string), what) {
			t.Errorf("the warning does not name %q: %s", what, warns[0]["msg"])
		}
	}
	if r := s.Do("DELETE", "/v1/environments/"+id, apitest.BobToken, nil); r.Status != 200 {
		t.Fatalf("delete: %d", r.Status)
	}
	s.wait(t, id, domain.StateStopped)
}
