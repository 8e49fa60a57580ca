package checkpoint

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/agent/archive"
	"github.com/envlease/envlease/shared/agent/archive/archivetest"
	"github.com/envlease/envlease/shared/agent/runtimes"
)

// maxRestoreHeap bounds what the agent's heap may grow by, and allocate in
// all, while it refuses the audit's checkpoint: about one name of 1 MB as
// archive/tar reads it and the zstd decoder's window, nowhere near the 2 GB
// of names the first pass used to keep.
const maxRestoreHeap = 32 << 20

// The audit's checkpoint (a few hundred KB of the checkpoint's content
// type holding 2,000 entries with 1 MB names, 2 GB of names) is refused at
// its first name, with an error that says which limit and is short itself,
// and the heap stays bounded: measured by the Go runtime's own counters,
// not by time. With the length limit off, the total of names stops it
// after a few names.
func TestRestoreRefusesTheAuditsCheckpoint(t *testing.T) {
	arch, err := archivetest.LongNames(2000, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("2,000 names of 1 MB: %d bytes as .tar.zst", len(arch))
	for _, c := range []struct {
		name   string
		limits archive.Limits
		want   string
	}{
		{"the default limits", archive.Limits{}, "a name of 976.6 KiB exceeds 4096 bytes (agent limit -archive-max-name), at entry \"aaaa"},
		{"no length limit", archive.Limits{MaxNameBytes: -1, MaxNamesBytes: 4 << 20}, "the archive exceeds 4.0 MiB of names (agent limit -archive-max-names), at entry"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := Restore(bytes.NewReader(arch), int64(len(arch)), runtimes.Files{Root: dir}, nil, archive.NewBudget(c.limits))
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %.300v, want %q", err, c.want)
			}
			// A name within the length limit is quoted whole: with no
			// limit, that is the name of 1 MB (the report cuts it).
			if c.limits.MaxNameBytes >= 0 && len(err.Error()) > 400 {
				t.Errorf("the error is %d bytes long: %.300s…", len(err.Error()), err)
			}
			allocated := after.TotalAlloc - before.TotalAlloc
			grown := int64(after.HeapInuse) - int64(before.HeapInuse)
			t.Logf("allocated %d KiB, heap in use grew by %d KiB", allocated>>10, grown>>10)
			if allocated > maxRestoreHeap || grown > maxRestoreHeap {
				t.Fatalf("refusing it allocated %d bytes and grew the heap by %d, want at most %d", allocated, grown, maxRestoreHeap)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Fatalf("the refused checkpoint left %d names", len(left))
			}
		})
	}
}
