package image

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// tent is one tar entry of a test layer.
type tent struct {
	name string
	typ  byte
	body string
	link string
	mode int64
}

func layerTar(t testing.TB, entries ...tent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Size: int64(len(e.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// applyAll applies layers into a fresh folder inside a parent that also
// holds an "outside" folder, the target of the hostile layers.
func applyAll(t *testing.T, opt ApplyOptions, layers ...[]byte) (dir, outside string, err error) {
	t.Helper()
	parent := t.TempDir()
	dir, outside = filepath.Join(parent, "rootfs"), filepath.Join(parent, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root, rerr := os.OpenRoot(dir)
	if rerr != nil {
		t.Fatal(rerr)
	}
	defer root.Close()
	a := NewApplier(root, opt)
	for _, l := range layers {
		if err = a.Apply(bytes.NewReader(l)); err != nil {
			return dir, outside, err
		}
	}
	return dir, outside, nil
}

func TestApplyWhiteouts(t *testing.T) {
	base := layerTar(t,
		tent{name: "etc/", typ: tar.TypeDir},
		tent{name: "etc/keep", body: "k"},
		tent{name: "etc/gone", body: "g"},
		tent{name: "var/cache/", typ: tar.TypeDir},
		tent{name: "var/cache/a", body: "a"},
		tent{name: "var/cache/sub/b", body: "b"},
		tent{name: "opt/tree/x", body: "x"},
		tent{name: "usr/bin/tool", body: "old"},
	)
	top := layerTar(t,
		tent{name: "etc/.wh.gone", body: ""},
		// A file written by this layer before the opaque marker stays.
		tent{name: "var/cache/new", body: "n"},
		tent{name: "var/cache/deep/er/file", body: "d"},
		tent{name: "var/cache/.wh..wh..opq"},
		tent{name: ".wh.opt"},
		// A file replaces a folder of an earlier layer.
		tent{name: "usr/bin", body: "now a file"},
	)
	dir, _, err := applyAll(t, ApplyOptions{}, base, top)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path   string
		exists bool
	}{
		{"etc/keep", true},
		{"etc/gone", false},
		{"etc/.wh.gone", false},
		{"var/cache/a", false},
		{"var/cache/sub", false},
		{"var/cache/new", true},
		{"var/cache/deep/er/file", true},
		{"var/cache/.wh..wh..opq", false},
		{"opt", false},
		{"usr/bin", true},
	} {
		_, err := os.Lstat(filepath.Join(dir, tc.path))
		if got := err == nil; got != tc.exists {
			t.Errorf("%s: exists=%v, want %v (%v)", tc.path, got, tc.exists, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "usr/bin")); string(b) != "now a file" {
		t.Errorf("usr/bin = %q", b)
	}
}

func TestApplyKeepsRootfsEntries(t *testing.T) {
	l := layerTar(t,
		tent{name: "bin/busybox", body: "#!", mode: 0o755},
		tent{name: "bin/sh", typ: tar.TypeSymlink, link: "/bin/busybox"},
		tent{name: "usr/bin/su", body: "su", mode: 0o4755},
		tent{name: "bin/ls", typ: tar.TypeLink, link: "bin/busybox"},
		tent{name: "run/fifo", typ: tar.TypeFifo, mode: 0o600},
		tent{name: "dev/null", typ: tar.TypeChar, mode: 0o666},
		tent{name: "/abs/name", body: "leading slash dropped"},
	)
	dir, _, err := applyAll(t, ApplyOptions{}, l)
	if err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "bin/sh")); err != nil || target != "/bin/busybox" {
		t.Errorf("bin/sh -> %q, %v; want the absolute link kept", target, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "usr/bin/su")); err != nil || st.Mode()&os.ModeSetuid == 0 {
		t.Errorf("usr/bin/su: %v %v; want set-uid kept", st.Mode(), err)
	}
	a, _ := os.Stat(filepath.Join(dir, "bin/ls"))
	b, _ := os.Stat(filepath.Join(dir, "bin/busybox"))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Errorf("bin/ls is not a hard link of bin/busybox")
	}
	if st, err := os.Lstat(filepath.Join(dir, "run/fifo")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("run/fifo: %v %v", st, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "dev/null")); err == nil {
		t.Errorf("dev/null created without ApplyOptions.Devices")
	}
	if _, err := os.Stat(filepath.Join(dir, "abs/name")); err != nil {
		t.Errorf("abs/name: %v", err)
	}
}

func TestApplyRefusesHostileLayers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layers [][]byte
		want   string
	}{
		{"dot-dot", [][]byte{layerTar(t, tent{name: "../outside/pwned", body: "x"})}, ".."},
		{"dot-dot inside", [][]byte{layerTar(t, tent{name: "a/../../outside/pwned", body: "x"})}, ".."},
		{"relative symlink then a file through it", [][]byte{layerTar(t,
			tent{name: "evil", typ: tar.TypeSymlink, link: "../outside"},
			tent{name: "evil/pwned", body: "x"})}, "outside the root filesystem"},
		{"absolute symlink then a file through it", [][]byte{layerTar(t,
			tent{name: "evil", typ: tar.TypeSymlink, link: "/"},
			tent{name: "evil/tmp/pwned", body: "x"})}, "outside the root filesystem"},
		{"symlink in one layer, file in the next", [][]byte{
			layerTar(t, tent{name: "evil", typ: tar.TypeSymlink, link: "../outside"}),
			layerTar(t, tent{name: "evil/pwned", body: "x"})}, "outside the root filesystem"},
		{"whiteout through a symlink", [][]byte{
			layerTar(t, tent{name: "evil", typ: tar.TypeSymlink, link: "../outside"}),
			layerTar(t, tent{name: "evil/.wh.victim"})}, "outside the root filesystem"},
		{"hard link out", [][]byte{layerTar(t, tent{name: "h", typ: tar.TypeLink, link: "../outside/victim"})}, ".."},
		{"hard link through a symlink", [][]byte{layerTar(t,
			tent{name: "evil", typ: tar.TypeSymlink, link: "../outside"},
			tent{name: "h", typ: tar.TypeLink, link: "evil/victim"})}, "outside"},
		{"fifo through a symlink", [][]byte{layerTar(t,
			tent{name: "evil", typ: tar.TypeSymlink, link: "/"},
			tent{name: "evil/fifo", typ: tar.TypeFifo})}, "outside the root filesystem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, outside, err := applyAll(t, ApplyOptions{Devices: true}, tc.layers...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
			if des, _ := os.ReadDir(outside); len(des) != 0 {
				t.Fatalf("the layer wrote outside: %v", des)
			}
		})
	}
}

func TestApplyLimits(t *testing.T) {
	l := layerTar(t, tent{name: "a", body: "12345"}, tent{name: "b", body: "67890"}, tent{name: "c/", typ: tar.TypeDir})
	for _, tc := range []struct {
		name string
		opt  ApplyOptions
		want string
	}{
		{"bytes", ApplyOptions{MaxBytes: 9}, "more than 9 bytes"},
		{"entries", ApplyOptions{MaxEntries: 2}, "more than 2 entries"},
		{"within", ApplyOptions{MaxBytes: 10, MaxEntries: 3}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := applyAll(t, tc.opt, l)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestApplyDevicesAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating device nodes needs root")
	}
	l := layerTar(t, tent{name: "dev/null", typ: tar.TypeChar, mode: 0o666})
	dir, _, err := applyAll(t, ApplyOptions{Devices: true, Owners: true}, l)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(filepath.Join(dir, "dev/null")); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("dev/null: %v %v", st, err)
	}
}

// A layer may give its entries only owners of the container's ids: an
// owner outside them (the audit's PAX uid of 2^32 - 1,000,000, which the
// shift would wrap to the node's root; a negative id; a gid one past the
// range) is refused naming the entry, before anything of the entry is
// written. Owners within the range are kept, shifted, and a set-uid bit
// stays after the owner is set.
func TestApplyBoundsOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving files to other owners takes root")
	}
	const shift, ids = 300000, 65536
	layer := func(uid, gid int) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range []*tar.Header{
			{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "bin/su", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 2, Uid: uid, Gid: gid, Format: tar.FormatPAX},
		} {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Size > 0 {
				_, _ = tw.Write([]byte("su"))
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	for _, c := range []struct {
		name     string
		uid, gid int
		want     string
	}{
		{"the audit's uid", 1<<32 - 1_000_000, 0, `entry "bin/su": its owner 4293967296:0 is outside the container's ids 0-65535`},
		{"a negative uid", -1, 0, "outside the container's ids"},
		{"a gid past the range", 0, ids, `its owner 0:65536 is outside the container's ids 0-65535`},
		{"the range's last id", ids - 1, ids - 1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, _, err := applyAll(t, ApplyOptions{Owners: true, IDShift: shift, IDs: ids}, layer(c.uid, c.gid))
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("err = %v, want %q", err, c.want)
				}
				if _, err := os.Lstat(filepath.Join(dir, "bin/su")); err == nil {
					t.Fatal("the refused entry was written")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(filepath.Join(dir, "bin/su"))
			if err != nil {
				t.Fatal(err)
			}
			s := st.Sys().(*syscall.Stat_t)
			if s.Uid != uint32(shift+c.uid) || s.Gid != uint32(shift+c.gid) || st.Mode()&os.ModeSetuid == 0 {
				t.Fatalf("bin/su is %d:%d %v, want %d:%d with set-uid", s.Uid, s.Gid, st.Mode(), shift+c.uid, shift+c.gid)
			}
		})
	}
}

// Names are bounded before they are kept: a name past the length limit is
// refused with an error that quotes its start only.
func TestApplyBoundsNames(t *testing.T) {
	long := strings.Repeat("n", DefaultMaxNameBytes+1)
	_, _, err := applyAll(t, ApplyOptions{}, layerTar(t, tent{name: "ok", body: "x"}, tent{name: long, body: "x"}))
	if err == nil || !strings.Contains(err.Error(), "a name of 4.0 KiB exceeds 4096 bytes, at entry \"nnn") || len(err.Error()) > 300 {
		t.Fatalf("err = %.300v", err)
	}
}
