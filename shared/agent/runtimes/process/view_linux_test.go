//go:build linux

package process

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/agent/runtimes"
	"github.com/envlease/envlease/shared/domain"
)

// In namespaces of its own a process environment looks like its template,
// as a container does: its user has a name (whoami, id -un, USER), and its
// command and its execs work at the template's workdir (pwd), whether that
// is an empty folder of the node or a path under a top-level folder the
// node does not have. The node's own passwd is untouched.
func TestProcessLooksLikeItsTemplate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("users and namespaces of their own need root")
	}
	if err := confine.ProbeNamespaces(); err != nil {
		t.Skipf("this machine cannot make namespaces: %v", err)
	}
	users, err := confine.NewUIDPool(confine.DefaultUIDRange)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "envs"), 0o711); err != nil {
		t.Fatal(err)
	}
	// An empty folder of the node, and a top-level folder it lacks; outside
	// /tmp, which an environment may have a folder of its own over.
	node := fmt.Sprintf("/envlease-test-%d", rand.Uint64())
	top := fmt.Sprintf("/envlease-test-%d", rand.Uint64())
	t.Cleanup(func() { os.RemoveAll(node); os.RemoveAll(top) })
	empty := filepath.Join(node, "srv", "app")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	rt := New(Config{Node: &confine.Node{Users: users, Namespaces: true, Log: logger}, WorkDir: dir, Address: "127.0.0.1", Log: logger})

	// A folder of the node with files in it is never covered.
	full := filepath.Join(node, "opt", "tool")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "node-file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A relative workdir is a folder inside the environment's and stays
	// there, as a covered one does; its user has its name all the same.
	for i, tc := range []struct {
		workdir string
		at      bool // whether it works at the template's path
	}{{empty, true}, {top + "/workspace/app", true}, {"work", false}, {full, false}} {
		workdir := tc.workdir
		t.Run(workdir, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			h, err := rt.Prepare(ctx, runtimes.Env{ID: fmt.Sprintf("view-%d", i), Org: "acme", Template: domain.Template{
				Name: "view", Workdir: workdir,
				Command: []string{"sh", "-c", `{ whoami; id -un; id -gn; pwd; echo "$USER"; } > out.tmp && mv out.tmp out; exec sleep 3600`},
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Remove()
			if err := h.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer h.Stop(time.Second)
			out := filepath.Join(h.Files().Root, workdir, "out")
			pwd := workdir
			if !tc.at {
				pwd = filepath.Join(h.Files().Root, workdir)
			}
			var got []byte
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
				if got, err = os.ReadFile(out); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the command wrote no %s: %v (%v)", out, err, h.Err())
				}
			}
			want := strings.Join([]string{UserName, UserName, UserName, pwd, UserName}, "\n") + "\n"
			if string(got) != want {
				t.Errorf("the command saw whoami, id -un, id -gn, pwd, $USER as\n%s\nwant\n%s", got, want)
			}

			// An exec (envlease exec, shell) enters the same view.
			var stdout, stderr bytes.Buffer
			p, err := h.Exec(ctx, runtimes.ExecSpec{Args: []string{"sh", "-c", `whoami; pwd; ls -ld . | awk '{print $3}'`}, Stdout: &stdout, Stderr: &stderr})
			if err != nil {
				t.Fatal(err)
			}
			if code, err := p.Wait(); code != 0 || err != nil {
				t.Fatalf("exec: %d %v: %s", code, err, stderr.String())
			}
			if want := UserName + "\n" + pwd + "\n" + UserName + "\n"; stdout.String() != want {
				t.Errorf("an exec saw whoami, pwd, the folder's owner as\n%s\nwant\n%s", stdout.String(), want)
			}
			// A bash prompt's \u is the name, not "I have no name!".
			if _, err := os.Stat("/bin/bash"); err == nil {
				stdout.Reset()
				p, err := h.Exec(ctx, runtimes.ExecSpec{Args: []string{"bash", "-c", `p='\u'; echo "${p@P}"`}, Stdout: &stdout, Stderr: &stderr})
				if err != nil {
					t.Fatal(err)
				}
				if code, err := p.Wait(); code != 0 || err != nil || stdout.String() != UserName+"\n" {
					t.Errorf("bash's prompt names the user %q (exit %d, %v): %s", stdout.String(), code, err, stderr.String())
				}
			}
		})
	}
	if now, err := os.ReadFile("/etc/passwd"); err != nil || !bytes.Equal(now, passwd) {
		t.Errorf("the node's /etc/passwd changed (%v)", err)
	}
	if entries, err := os.ReadDir(full); err != nil || len(entries) != 1 {
		t.Errorf("the node's folder %s holds %v, %v", full, entries, err)
	}
	if entries, err := os.ReadDir(top + "/workspace/app"); err != nil || len(entries) != 0 {
		t.Errorf("the mount point the environment left on the node: %v, %v", entries, err)
	}
}
