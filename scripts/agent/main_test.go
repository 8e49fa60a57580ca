package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/archive"
)

func noEnv(string) string { return "" }

func credentialFile(t *testing.T, mode os.FileMode, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "node-credential")
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// The credential comes from a file only the agent's user can read, or from
// $ENVLEASE_NODE_TOKEN; a file group or others may read or write is refused
// with what to do, and so is a credential in the arguments.
func TestCredentialSources(t *testing.T) {
	const tok = "els_node_0123456789abcdef"
	o, err := parse([]string{"-credential-file", credentialFile(t, 0o600, tok+"\n")}, noEnv, io.Discard)
	if err != nil || o.cfg.Token != tok {
		t.Fatalf("0600 file: %q %v", o.cfg.Token, err)
	}
	if o, err := parse([]string{"-credential-file", credentialFile(t, 0o400, tok)}, noEnv, io.Discard); err != nil || o.cfg.Token != tok {
		t.Fatalf("0400 file: %q %v", o.cfg.Token, err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		p := credentialFile(t, mode, tok)
		_, err := parse([]string{"-credential-file", p}, noEnv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	if _, err := parse([]string{"-credential-file", credentialFile(t, 0o600, tok+"\nsecond line")}, noEnv, io.Discard); err == nil {
		t.Error("a file with more than the credential was read")
	}
	env := func(k string) string {
		if k == "ENVLEASE_NODE_TOKEN" {
			return "els_node_fromenv"
		}
		return ""
	}
	if o, err := parse(nil, env, io.Discard); err != nil || o.cfg.Token != "els_node_fromenv" {
		t.Fatalf("from the environment: %q %v", o.cfg.Token, err)
	}
	if o, err := parse([]string{"-credential-file", credentialFile(t, 0o600, tok)}, env, io.Discard); err != nil || o.cfg.Token != tok {
		t.Fatalf("the file goes first: %q %v", o.cfg.Token, err)
	}
	if _, err := parse([]string{"-token", tok}, env, io.Discard); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "-credential-file") {
		t.Fatalf("-token: %v", err)
	}
	if _, err := parse(nil, noEnv, io.Discard); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "-credential-file") {
		t.Fatalf("no credential: %v", err)
	}
}

// -uid-range sets the users environments run as; ranges that would take in
// root, system users or nobody are refused.
func TestUIDRange(t *testing.T) {
	cred := credentialFile(t, 0o600, "els_node_x")
	o, err := parse([]string{"-credential-file", cred}, noEnv, io.Discard)
	if err != nil || o.cfg.UIDs != agent.DefaultUIDRange {
		t.Fatalf("default: %v %v", o.cfg.UIDs, err)
	}
	o, err = parse([]string{"-credential-file", cred, "-uid-range", "300000-300999"}, noEnv, io.Discard)
	if err != nil || o.cfg.UIDs != (agent.UIDRange{First: 300000, Last: 300999}) {
		t.Fatalf("300000-300999: %v %v", o.cfg.UIDs, err)
	}
	for _, bad := range []string{"0-100", "500-2000", "60000-70000", "5000-4000", "200000", "a-b", "100000-4294967295"} {
		if _, err := parse([]string{"-credential-file", cred, "-uid-range", bad}, noEnv, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("-uid-range %s: %v", bad, err)
		}
	}
}

// The archive limits and the disk floors default to the agent's defaults,
// take sizes, counts and percentages, turn off with 0, and refuse nonsense.
func TestArchiveLimitsAndDiskFloors(t *testing.T) {
	cred := credentialFile(t, 0o600, "els_node_x")
	o, err := parse([]string{"-credential-file", cred}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := archive.Limits{MaxEntries: archive.DefaultMaxEntries, MaxBytes: archive.DefaultMaxBytes, MaxRatio: archive.DefaultMaxRatio,
		MaxNameBytes: archive.DefaultMaxNameBytes, MaxNamesBytes: archive.DefaultMaxNamesBytes}
	if o.cfg.Archives != want || o.cfg.MinFreeDisk != agent.DefaultMinFreeDisk || o.cfg.MinFreeInodes != agent.DefaultMinFreeInodes {
		t.Fatalf("defaults: %+v %+v %+v", o.cfg.Archives, o.cfg.MinFreeDisk, o.cfg.MinFreeInodes)
	}
	o, err = parse([]string{"-credential-file", cred, "-archive-max-entries", "1000", "-archive-max-bytes", "500M",
		"-archive-max-ratio", "20", "-archive-max-name", "1024", "-archive-max-names", "1Mi", "-min-free-disk", "10%", "-min-free-inodes", "20000"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Archives != (archive.Limits{MaxEntries: 1000, MaxBytes: 500e6, MaxRatio: 20, MaxNameBytes: 1024, MaxNamesBytes: 1 << 20}) ||
		o.cfg.MinFreeDisk.Percent != 10 || o.cfg.MinFreeInodes.Amount != 20000 {
		t.Fatalf("set: %+v %+v %+v", o.cfg.Archives, o.cfg.MinFreeDisk, o.cfg.MinFreeInodes)
	}
	if o.cfg.DiskDefault != 10<<30 || o.cfg.DiskMax != 100<<30 {
		t.Fatalf("disks: %d %d", o.cfg.DiskDefault, o.cfg.DiskMax)
	}
	o, err = parse([]string{"-credential-file", cred, "-archive-max-entries", "0", "-archive-max-bytes", "0",
		"-archive-max-ratio", "0", "-archive-max-name", "0", "-archive-max-names", "0", "-min-free-disk", "0", "-min-free-inodes", "0"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Archives != (archive.Limits{MaxEntries: -1, MaxBytes: -1, MaxRatio: -1, MaxNameBytes: -1, MaxNamesBytes: -1}) ||
		o.cfg.MinFreeDisk.Amount != 0 || o.cfg.MinFreeDisk.Percent != 0 || o.cfg.MinFreeDisk == agent.DefaultMinFreeDisk {
		t.Fatalf("off: %+v %+v", o.cfg.Archives, o.cfg.MinFreeDisk)
	}
	for _, bad := range [][]string{
		{"-archive-max-entries", "-5"}, {"-archive-max-bytes", "lots"}, {"-archive-max-ratio", "-1"}, {"-archive-max-name", "-1"}, {"-archive-max-names", "lots"},
		{"-min-free-disk", "101%"}, {"-min-free-disk", "x"}, {"-min-free-inodes", "1Gi"},
		{"-disk-default", "lots"}, {"-disk-max", "1Gi"}, {"-disk-default", "200Gi"},
	} {
		if _, err := parse(append([]string{"-credential-file", cred}, bad...), noEnv, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}
