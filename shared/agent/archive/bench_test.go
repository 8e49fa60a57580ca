package archive_test

import (
	"archive/tar"
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/agent/archive"
)

// BenchmarkUnpackTar unpacks 2,000 small files, as a dependency tree has
// them, at two depths: the cost per file should not grow with the depth of
// the folders on its way.
func BenchmarkUnpackTar(b *testing.B) {
	for _, depth := range []int{4, 32} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for i := range 2000 {
			name := strings.Repeat(fmt.Sprintf("p%d/", i%20), depth) + fmt.Sprintf("f%04d", i)
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}); err != nil {
				b.Fatal(err)
			}
			if _, err := tw.Write([]byte("x")); err != nil {
				b.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("depth %d", depth), func(b *testing.B) {
			for b.Loop() {
				if _, err := archive.UnpackTar(bytes.NewReader(buf.Bytes()), b.TempDir(), archive.UnpackOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
