package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/apitest"
	"github.com/envlease/envlease/shared/domain"
)

// proc is what /proc says of one process.
type proc struct {
	pid, ppid int
	cmdline   string // arguments joined by spaces
}

// processes lists every process of the machine that /proc shows now.
// Processes that end while it reads are left out.
func processes(t *testing.T) map[int]proc {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]proc{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The parent's pid is the second field after the parenthesised name,
		// which may itself hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[i+1:]))
		if i < 0 || len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		out[pid] = proc{pid: pid, ppid: ppid, cmdline: string(bytes.ReplaceAll(bytes.TrimRight(cmdline, "\x00"), []byte{0}, []byte{' '}))}
	}
	return out
}

// descendants returns the processes below root in ps.
func descendants(ps map[int]proc, root int) map[int]proc {
	children := map[int][]int{}
	for _, p := range ps {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	out := map[int]proc{}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if _, seen := out[c]; !seen {
				out[c] = ps[c]
				queue = append(queue, c)
			}
		}
	}
	return out
}

// processEnv reads one variable of a process's environment.
func processEnv(t *testing.T, pid int, name string) string {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatalf("environment of %d: %v", pid, err)
	}
	for _, kv := range bytes.Split(raw, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(name+"=")); ok {
			return string(v)
		}
	}
	return ""
}

// gatewayCredential reads one of versitygw's credentials where it was given
// to it: its environment, or (so that this test fails, rather than cannot
// tell, when they are back there) the argument after flag.
func gatewayCredential(t *testing.T, p proc, env, flag string) string {
	t.Helper()
	if v := processEnv(t, p.pid, env); v != "" {
		return v
	}
	if _, after, ok := strings.Cut(p.cmdline, flag+" "); ok {
		return strings.Fields(after)[0]
	}
	return ""
}

// No secret of the running stack is on any process's command line, which
// every user of the machine can read (ps, /proc/<pid>/cmdline): not the S3
// gateway's credentials, not a person's token or a sandbox's join key, not
// the node credentials of the agents, not the token envlease console signs
// in with. The stack runs as the devserver runs it (DynamoDB, versitygw and
// an agent per pool, with an environment running), with a node agent of its
// own as a separate process (scripts/agent, its credential in a file), and
// the CLI's browser opener is a stand-in that stays alive to be looked at.
func TestNoSecretOnACommandLine(t *testing.T) {
	base := startDevserver(t)
	c := api{t: t, base: base, token: apitest.BobToken}
	var sbx struct {
		Sandbox struct {
			ID string `json:"id"`
		} `json:"sandbox"`
		JoinKey string `json:"joinKey"`
	}
	if s := c.do("POST", "/v1/sandboxes", map[string]any{"name": "laptop"}, &sbx); s != 201 || sbx.JoinKey == "" {
		t.Fatalf("register sandbox: %d", s)
	}
	var leased envAnswer
	if s := c.do("POST", "/v1/environments", map[string]any{"template": "sleeper", "sandbox": sbx.Sandbox.ID}, &leased); s != 201 {
		t.Fatalf("lease: %d", s)
	}
	c.waitState(leased.Environment.ID, domain.StateReady, time.Minute)
	t.Cleanup(func() { c.do("DELETE", "/v1/environments/"+leased.Environment.ID, nil, nil) })

	nodeToken := startAgentProcess(t, base)
	opener := openConsole(t, base, apitest.BobToken)

	ps := processes(t)
	mine := descendants(ps, os.Getpid())
	// The opener outlived envlease, its parent, so it hangs below whatever
	// adopted it.
	var openerProc proc
	for _, p := range ps {
		if strings.HasPrefix(p.cmdline, "/bin/sh "+opener) {
			openerProc = p
			mine[p.pid] = p
		}
	}
	// The opener gets only the path of a page only its user can read; the
	// page holds the sign-in address.
	if openerProc.cmdline == "" || strings.Contains(openerProc.cmdline, "elc_") || strings.Contains(openerProc.cmdline, "#code=") {
		t.Fatalf("the browser opener's command line holds the sign-in code, or no opener was found: %q", openerProc.cmdline)
	}
	if page, err := os.ReadFile(opener + ".page"); err != nil || !strings.Contains(string(page), base+"/#code=elc_") {
		t.Fatalf("the page the opener got does not send the browser to a sign-in code: %v\n%s", err, page)
	}
	var gateway, sleeper int
	for _, p := range mine {
		switch {
		case p.ppid == os.Getpid() && strings.Contains(p.cmdline, "versitygw"):
			gateway = p.pid
		case p.cmdline == "sleep 3600":
			sleeper = p.pid
		}
	}
	if gateway == 0 || sleeper == 0 {
		t.Fatalf("the gateway (%d) or the environment's process (%d) is not among the test's processes: %v", gateway, sleeper, mine)
	}
	secrets := map[string]string{
		"the S3 secret key":    gatewayCredential(t, ps[gateway], "ROOT_SECRET_ACCESS_KEY", "--secret"),
		"the S3 access key":    gatewayCredential(t, ps[gateway], "ROOT_ACCESS_KEY_ID", "--access"),
		"a sandbox's join key": sbx.JoinKey,
		"alice's token":        apitest.AliceToken,
		"bob's token":          apitest.BobToken,
		"carol's token":        apitest.CarolToken,
		"a node credential":    nodeToken,
	}
	for what, v := range secrets {
		if len(v) < 8 {
			t.Fatalf("%s is %q: not read", what, v)
		}
	}
	checkCommandLines(t, ps, mine, secrets)
	t.Logf("%d processes on the machine, %d of them the stack's", len(ps), len(mine))
}

// checkCommandLines fails for any process of the machine whose command line
// holds one of the secrets, and for any of the stack's processes (mine) whose
// command line holds anything shaped like a token (els_...), which catches
// the credentials the test never sees, such as the agents'.
func checkCommandLines(t *testing.T, all, mine map[int]proc, secrets map[string]string) {
	t.Helper()
	for _, p := range all {
		for what, v := range secrets {
			if strings.Contains(p.cmdline, v) {
				t.Errorf("process %d has %s on its command line: %q", p.pid, what, p.cmdline)
			}
		}
	}
	for _, p := range mine {
		if strings.Contains(p.cmdline, "els_") {
			t.Errorf("process %d of the stack has a token on its command line: %q", p.pid, p.cmdline)
		}
	}
}

// openConsole builds the CLI and runs envlease console with token against
// base, its browser opener (xdg-open) being a script that records the address
// and then waits, alive, until the test ends. It returns the script's path
// once the script has started.
func openConsole(t *testing.T, base, token string) string {
	t.Helper()
	dir := t.TempDir()
	cli := filepath.Join(dir, "envlease")
	if out, err := exec.Command("go", "build", "-o", cli, "../envlease").CombinedOutput(); err != nil {
		t.Fatalf("build the CLI: %v\n%s", err, out)
	}
	hold := filepath.Join(dir, "hold")
	if err := syscall.Mkfifo(hold, 0o600); err != nil {
		t.Fatal(err)
	}
	opened := filepath.Join(dir, "opened")
	opener := filepath.Join(dir, "xdg-open")
	script := "#!/bin/sh\ncat \"$1\" > \"$0.page\" && printf '%s' \"$1\" > \"$OPENED.tmp\" && mv \"$OPENED.tmp\" \"$OPENED\"\nread _ < \"$HOLD\"\n"
	if err := os.WriteFile(opener, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// The opener ends when the fifo's writer closes: it reads end of file.
	t.Cleanup(func() {
		if f, err := os.OpenFile(hold, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	cmd := exec.Command(cli, "console")
	cmd.Env = []string{
		"PATH=" + dir + ":" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "XDG_CONFIG_HOME=" + t.TempDir(),
		"ENVLEASE_URL=" + base, "ENVLEASE_TOKEN=" + token, "OPENED=" + opened, "HOLD=" + hold,
		// A desktop session: without a display, envlease console prints
		// the address instead of starting an opener.
		"DISPLAY=:0",
	}
	// envlease console waits until the page has spent its code, which
	// nothing does here: it runs, looked at, until the test ends.
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("envlease console: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(opened); err == nil {
			return opener
		}
		if time.Now().After(deadline) {
			t.Fatalf("the browser opener did not start; envlease console said:\n%s", out.String())
		}
	}
}

// startAgentProcess builds the reference agent and runs it as a node of
// acme's pool, its credential (issued as an admin would) in a file of mode
// 0600, until the test ends. It returns the credential once the node is
// registered.
func startAgentProcess(t *testing.T, base string) string {
	t.Helper()
	alice := api{t: t, base: base, token: apitest.AliceToken}
	var issued struct {
		Token string `json:"token"`
	}
	if s := alice.do("POST", "/v1/nodes/credentials", map[string]any{"pool": "local", "name": "cmdline-probe"}, &issued); s != 201 || issued.Token == "" {
		t.Fatalf("issue a node credential: %d", s)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "agent")
	if out, err := exec.Command("go", "build", "-o", bin, "../agent").CombinedOutput(); err != nil {
		t.Fatalf("build the agent: %v\n%s", err, out)
	}
	cred := filepath.Join(dir, "credential")
	if err := os.WriteFile(cred, []byte(issued.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-api", base, "-credential-file", cred, "-name", "cmdline-probe", "-workdir", t.TempDir(), "-no-warm", "-log", "warn")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var nodes struct {
			Nodes []struct {
				Name  string `json:"name"`
				State string `json:"state"`
			} `json:"nodes"`
		}
		alice.do("GET", "/v1/nodes", nil, &nodes)
		for _, n := range nodes.Nodes {
			if n.Name == "cmdline-probe" && n.State == "active" {
				return issued.Token
			}
		}
		select {
		case <-done:
			t.Fatalf("the agent exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not register: %s", out.String())
		}
	}
}
