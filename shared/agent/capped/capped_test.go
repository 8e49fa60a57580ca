package capped

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestFileKeepsItsLastBytesWithinItsBound(t *testing.T) {
	for _, c := range []struct {
		name  string
		max   int64
		write int // bytes per write
		total int
	}{
		{"small writes", 1 << 10, 7, 1 << 20},
		{"writes larger than a half", 1 << 10, 3000, 1 << 20},
		{"less than a half", 1 << 10, 10, 300},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			name := filepath.Join(dir, "out.log")
			root, err := os.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			for _, open := range []Opener{OpenPath(name), OpenIn(root, "out.log", nil)} {
				os.Remove(name)
				os.Remove(name + ".1")
				f, err := New(c.max, open)
				if err != nil {
					t.Fatal(err)
				}
				var all bytes.Buffer
				for i := 0; all.Len() < c.total; i++ {
					b := bytes.Repeat([]byte{byte('a' + i%26)}, c.write)
					all.Write(b)
					f.Write(b)
				}
				f.Close()
				cur, _ := os.ReadFile(name)
				old, _ := os.ReadFile(name + ".1")
				kept := append(old, cur...)
				if int64(len(kept)) > c.max {
					t.Fatalf("kept %d bytes, bound %d", len(kept), c.max)
				}
				if !bytes.HasSuffix(all.Bytes(), cur) || len(cur) == 0 {
					t.Fatalf("the current file is not the last of the output")
				}
			}
		})
	}
}

func TestOpenInReplacesALinkRatherThanFollowingIt(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	target := filepath.Join(outside, "target")
	if err := os.WriteFile(target, []byte("node's"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"out.log", "out.log.1"} {
		if err := os.Symlink(target, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	root, _ := os.OpenRoot(dir)
	defer root.Close()
	f, err := New(64, OpenIn(root, "out.log", nil))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		f.Write([]byte("0123456789"))
	}
	f.Close()
	if b, _ := os.ReadFile(target); string(b) != "node's" {
		t.Fatalf("the link's target was written: %q", b)
	}
}
