package process

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPasswdOwner: the owner of UserName is read from the file, and read
// again once the file changed.
func TestPasswdOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	p := passwdOwner{path: path}
	if _, ok := p.owner(); ok {
		t.Fatal("a missing file gave an owner")
	}
	steps := []struct {
		content, want string
	}{
		{"root:x:0:0:root:/root:/bin/bash\n", noOwner},
		{"root:x:0:0:root:/root:/bin/bash\nenvlease:x:1001:1001::/home/envlease:/bin/sh\n", "1001"},
		{"envlease:x:1002:1002::/home/envlease:/bin/sh\nenvlease:x:7:7::/:/bin/sh\n", "1002"},
	}
	for i, s := range steps {
		if err := os.WriteFile(path, []byte(s.content), 0o644); err != nil {
			t.Fatal(err)
		}
		// A rewrite within the file system's time granularity is told by
		// its size; make the time differ too.
		at := time.Now().Add(time.Duration(i) * time.Second)
		_ = os.Chtimes(path, at, at)
		for range 2 { // the second answer comes from what was kept
			if got, ok := p.owner(); !ok || got != s.want {
				t.Fatalf("step %d: owner %q %v, want %q", i, got, ok, s.want)
			}
		}
	}
}
