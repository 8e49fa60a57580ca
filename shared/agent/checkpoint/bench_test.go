package checkpoint

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/envlease/envlease/shared/agent/archive"
	"github.com/envlease/envlease/shared/domain"
)

// benchTree makes files files of size bytes each (random, so compression
// does not flatter), ten to a folder.
func benchTree(b *testing.B, files, size int) string {
	b.Helper()
	dir := b.TempDir()
	buf := make([]byte, size)
	for i := 0; i < files; i++ {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/10))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		_, _ = rand.Read(buf)
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", i)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// BenchmarkCheckpoint times what a node does with a checkpoint of 1,000
// files of 16 KiB (16 MiB): pack (walk, hash, tar, zstd) and restore
// (read the manifest, unpack through the confined unpacker, verify every
// file's SHA-256 and mode). Freezing, the upload and the download are not
// in it (they are the network's and the cgroup's).
//
//	go test ./shared/agent -run '^$' -bench BenchmarkCheckpoint -benchtime 10x
func BenchmarkCheckpoint(b *testing.B) {
	const files, size = 1000, 16 << 10
	src := benchTree(b, files, size)
	var arch []byte
	b.Run("pack", func(b *testing.B) {
		b.SetBytes(files * size)
		for b.Loop() {
			var buf bytes.Buffer
			m := domain.CheckpointManifest{Version: 1}
			if err := Pack(src, &buf, &m, nil); err != nil {
				b.Fatal(err)
			}
			arch = buf.Bytes()
		}
	})
	b.Run("restore", func(b *testing.B) {
		b.SetBytes(files * size)
		for b.Loop() {
			b.StopTimer()
			dst := b.TempDir()
			b.StartTimer()
			m, err := ReadManifest(bytes.NewReader(arch), nil, 0)
			if err != nil {
				b.Fatal(err)
			}
			root, err := os.OpenRoot(dst)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := Unpack(bytes.NewReader(arch), root, nil, archive.UnpackOptions{Budget: archive.NewBudget(archive.Limits{})}); err != nil {
				b.Fatal(err)
			}
			if err := Verify(root, m); err != nil {
				b.Fatal(err)
			}
			root.Close()
		}
	})
}
