package envlog

import (
	"path/filepath"
	"testing"
)

// BenchmarkWrite is what an environment's output costs on its way to its
// log: one write of a 4 KiB chunk, through the ring's bound.
func BenchmarkWrite(b *testing.B) {
	l, err := Create(filepath.Join(b.TempDir(), "env.log"), DefaultMax, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Remove()
	chunk := make([]byte, 4<<10)
	for i := range chunk {
		chunk[i] = 'x'
	}
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, _ = l.Write(chunk)
	}
}
