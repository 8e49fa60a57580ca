package process

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPasswdOwner: the owner of UserName is read from the file, read again
// once the file changed, and a read kept only once the file is older than
// a clock's tick could hide: a rewrite of the same size with its modify
// time set back is still seen.
func TestPasswdOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	p := passwdOwner{path: path}
	if _, ok := p.owner(); ok {
		t.Fatal("a missing file gave an owner")
	}
	write := func(content string, at time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step, want string) {
		t.Helper()
		for range 2 { // the second answer may come from what was kept
			if got, ok := p.owner(); !ok || got != want {
				t.Fatalf("%s: owner %q %v, want %q", step, got, ok, want)
			}
		}
	}
	old := time.Now().Add(-time.Hour)
	write("root:x:0:0:root:/root:/bin/bash\n", old)
	check("no entry", noOwner)
	write("root:x:0:0:root:/root:/bin/bash\nenvlease:x:1001:1001::/home/envlease:/bin/sh\n", old)
	check("an entry", "1001")
	write("envlease:x:1002:1002::/home/envlease:/bin/sh\nenvlease:x:7:7::/:/bin/sh\n", old)
	check("the first of two", "1002")

	// Once the file is a second old, its read is kept…
	time.Sleep(1100 * time.Millisecond)
	check("kept", "1002")
	if !p.trusted {
		t.Fatal("a read of a file unchanged for a second was not kept")
	}
	// …until it changes, even to the same size and modify time.
	write("envlease:x:1003:1003::/home/envlease:/bin/sh\nenvlease:x:7:7::/:/bin/sh\n", old)
	check("rewritten, same size and time", "1003")
}
