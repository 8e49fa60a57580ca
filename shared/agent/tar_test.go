package agent_test

import (
	"archive/tar"
	"bytes"
	"testing"
)

// entry is one member of a test archive (tarOf).
type entry struct {
	name string
	typ  byte
	body string // a regular file's content
	link string // a link's target
}

func file(name, body string) entry  { return entry{name: name, typ: tar.TypeReg, body: body} }
func dir(name string) entry         { return entry{name: name, typ: tar.TypeDir} }
func symlink(name, to string) entry { return entry{name: name, typ: tar.TypeSymlink, link: to} }
func hardlink(name, to string) entry {
	return entry{name: name, typ: tar.TypeLink, link: to}
}

func tarOf(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body))}
		switch e.typ {
		case tar.TypeDir:
			h.Mode = 0o755
		case tar.TypeChar:
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}
