// Package archivetest makes the archives of the audit that the archive
// limits are tested with (docs/security.md, "Archives from members"): they
// are generated, never stored, and what a test holds of them is their
// compressed bytes.
package archivetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/envlease/envlease/shared/domain"
)

// TinyFiles returns a .tgz of n empty files in 100 folders.
func TinyFiles(n int) ([]byte, error) {
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for i := range n {
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%03d/f%05d", i%100, i), Typeflag: tar.TypeReg, Mode: 0o644}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// ManyFiles is the audit's first archive: 100,000 empty files.
var ManyFiles = sync.OnceValues(func() ([]byte, error) { return TinyFiles(100_000) })

// Zeros returns a .tar.zst of one file of size zero bytes per name, as
// `tar c | zstd` makes it: 1 GiB is some 33 KB. The zeros are streamed
// into the compressor, never held.
func Zeros(size int64, names ...string) ([]byte, error) {
	var out bytes.Buffer
	zw, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	chunk := make([]byte, 1<<20)
	for _, name := range names {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
			return nil, err
		}
		for left := size; left > 0; left -= int64(len(chunk)) {
			if _, err := tw.Write(chunk[:min(left, int64(len(chunk)))]); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// GiBOfZeros is the audit's second archive: a 1 GiB file of zeros.
var GiBOfZeros = sync.OnceValues(func() ([]byte, error) { return Zeros(1<<30, "zero.bin") })

// LongNames returns a .tar.zst of the checkpoint's content type that holds
// n empty files whose names are size bytes long (size at most 1,000,000, the
// largest name archive/tar writes) of one letter but for their last six
// digits, and a manifest that lists the first two: a checkpoint whose every
// name the restore's first pass would have kept. 2,000 names of 1 MB are
// 2 GB of names in a few hundred KB.
//
// Compressing 2 GB takes minutes, so it is not done: every entry's header
// is the same bytes up to its digits, which are compressed once as a zstd
// frame of their own and repeated, each followed by a small frame of that
// entry's digits and the rest of its header (a zstd stream may be any
// number of frames, decoded one after the other).
func LongNames(n, size int) ([]byte, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	long := strings.Repeat("a", size-6)
	var one bytes.Buffer
	tw := tar.NewWriter(&one)
	if err := tw.WriteHeader(&tar.Header{Name: long + "000000", Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if err := tw.Flush(); err != nil {
		return nil, err
	}
	entry := one.Bytes()
	at := bytes.LastIndex(entry, []byte("000000\n"))
	if at < 0 {
		return nil, fmt.Errorf("no digits in the header of %d bytes", len(entry))
	}
	head := enc.EncodeAll(entry[:at], nil)
	tail := bytes.Clone(entry[at:])
	var out bytes.Buffer
	for i := range n {
		copy(tail, fmt.Sprintf("%06d", i))
		out.Write(head)
		out.Write(enc.EncodeAll(tail, nil))
	}
	// The manifest lists the first two; the end of the archive follows it.
	var rest bytes.Buffer
	tw = tar.NewWriter(&rest)
	m := domain.CheckpointManifest{Version: 1}
	for i := range 2 {
		m.Files = append(m.Files, domain.CheckpointFile{Path: fmt.Sprintf("%s%06d", long, i), Type: domain.CheckpointTypeFile, Mode: 0o644})
	}
	if err := writeManifest(tw, m); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	out.Write(enc.EncodeAll(rest.Bytes(), nil))
	return out.Bytes(), nil
}

func writeManifest(tw *tar.Writer, m domain.CheckpointManifest) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: domain.CheckpointManifestEntry, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b)), Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err = tw.Write(b)
	return err
}

// Entry is one member of a small test archive (Tar).
type Entry struct {
	Name string
	Type byte
	Body string // a regular file's content
	Link string // a link's target
}

// File, Dir, Symlink and Hardlink are the members tests build archives of.
func File(name, body string) Entry  { return Entry{Name: name, Type: tar.TypeReg, Body: body} }
func Dir(name string) Entry         { return Entry{Name: name, Type: tar.TypeDir} }
func Symlink(name, to string) Entry { return Entry{Name: name, Type: tar.TypeSymlink, Link: to} }
func Hardlink(name, to string) Entry {
	return Entry{Name: name, Type: tar.TypeLink, Link: to}
}

// Tar writes entries as an uncompressed tar archive: folders 0755, files
// 0644, a character device as /dev/null's numbers.
func Tar(t testing.TB, entries ...Entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Typeflag: e.Type, Linkname: e.Link, Mode: 0o644, Size: int64(len(e.Body))}
		switch e.Type {
		case tar.TypeDir:
			h.Mode = 0o755
		case tar.TypeChar:
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.Body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}
