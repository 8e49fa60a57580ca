package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
	"github.com/envlease/envlease/shared/envfiles"
)

// envlease cp and fs (the real binary, against the whole stack): a file and
// a folder up and back with their modes, ls and stat as tables and JSON,
// cat, mkdir, rm; a path that leaves the environment is refused with its
// reason (exit 1), a missing one is not found (4), and every cp up is one
// environment.files event.
func TestCopyAndFiles(t *testing.T) {
	s := clienttest.Start(t, clienttest.WithTemplates("acme", boxTemplate))
	u := newUser(t, s)
	u.login(clienttest.BobToken)
	var leased client.Leased
	u.json(&leased, "lease", "--template", "box", "--wait")
	id := leased.Environment.ID

	local := t.TempDir()
	src := filepath.Join(local, "src")
	must(t, os.MkdirAll(filepath.Join(src, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "run.sh"), []byte("echo ran\n"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "sub", "data"), []byte("data"), 0o600))

	u.ok("cp", src, id+":work")
	if out := u.ok("exec", id, "--", "sh", "work/run.sh"); out != "ran\n" {
		t.Errorf("the copied script: %q", out)
	}
	out := u.ok("fs", "ls", id, "work")
	if !strings.Contains(out, "-0755") || !strings.Contains(out, "run.sh") || !strings.Contains(out, "sub/") {
		t.Errorf("fs ls:\n%s", out)
	}
	var l envfiles.FileList
	u.json(&l, "fs", "ls", id, "work/sub")
	if len(l.Entries) != 1 || l.Entries[0].Name != "data" || l.Entries[0].Mode != "0600" || l.Entries[0].Size != 4 {
		t.Errorf("fs ls -o json: %+v", l)
	}
	var fi envfiles.FileInfo
	u.json(&fi, "fs", "stat", id, "work/run.sh")
	if fi.Type != "file" || fi.Mode != "0755" || fi.Size != 9 {
		t.Errorf("fs stat -o json: %+v", fi)
	}
	if out := u.ok("fs", "cat", id, "work/sub/data"); out != "data" {
		t.Errorf("fs cat: %q", out)
	}
	// Back down, into a folder that exists: work lands in it as work.
	back := t.TempDir()
	u.ok("cp", id+":work", back)
	b, err := os.ReadFile(filepath.Join(back, "work", "sub", "data"))
	if err != nil || string(b) != "data" {
		t.Errorf("cp down: %q %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(back, "work", "run.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("cp down keeps the mode: %v %v", st, err)
	}
	// Standard input up, standard output down.
	if r := u.run("piped", "cp", "-", id+":piped.txt"); r.code != 0 {
		t.Fatalf("cp -: %d %s", r.code, r.stderr)
	}
	if out := u.ok("cp", id+":piped.txt", "-"); out != "piped" {
		t.Errorf("cp to -: %q", out)
	}
	u.ok("fs", "mkdir", id, "a/b/c", "-p")
	if r := u.run("", "fs", "rm", id, "a"); r.code != 1 || !strings.Contains(r.stderr, "not_empty") {
		t.Errorf("rm of a full folder: %d %s", r.code, r.stderr)
	}
	u.ok("fs", "rm", id, "a", "-r")
	if r := u.run("", "fs", "stat", id, "a"); r.code != 4 {
		t.Errorf("stat of what was removed: %d %s", r.code, r.stderr)
	}
	for _, tc := range []struct{ path, reason string }{
		{"../../etc/passwd", "outside_root"},
		{"/proc/self/environ", "special_path"},
	} {
		if r := u.run("", "fs", "cat", id, tc.path); r.code != 1 || !strings.Contains(r.stderr, tc.reason) {
			t.Errorf("fs cat %s: %d %s", tc.path, r.code, r.stderr)
		}
	}
	// Each command that changes files asked for one write ticket: one event
	// each (cp of a folder, cp -, mkdir, the refused rm and rm -r).
	evs := u.ok("events", "--type", "environment.files", "-o", "json")
	if n := strings.Count(evs, `"type":"environment.files"`); n != 5 {
		t.Errorf("environment.files events: %d, want 5:\n%s", n, evs)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A download writes each listed entry as one name in its folder: a listing
// that names anything else (a node not to be trusted that far) is refused.
func TestEntryNameStaysInItsFolder(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"notes.txt", true}, {".hidden", true}, {"a b", true}, {"..x", true},
		{"", false}, {".", false}, {"..", false}, {"../up", false}, {"a/b", false},
		{"/etc", false}, {`a\b`, false}, {"a\x00b", false},
	} {
		got, err := entryName(tc.name)
		if (err == nil) != tc.ok || (tc.ok && got != tc.name) {
			t.Errorf("entryName(%q) = %q, %v; want ok %v", tc.name, got, err, tc.ok)
		}
	}
}
