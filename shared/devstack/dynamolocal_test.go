package devstack

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The pin is read from the lockfile: an exact version and the tarball's
// SHA-512, which a download must match.
func TestDynamoLocalPinIsExact(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	version, integrity, err := pinnedDynamoLocal(filepath.Join(root, dynamoLocalDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(version, "^~<>* x") || !strings.HasPrefix(integrity, "sha512-") {
		t.Fatalf("pin %q %q is not exact", version, integrity)
	}
	f := filepath.Join(t.TempDir(), "pkg.tgz")
	if err := os.WriteFile(f, []byte("not the package"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkIntegrity(f, integrity); err == nil || !strings.Contains(err.Error(), "the lockfile pins") {
		t.Fatalf("a tarball that is not the pinned one: %v", err)
	}
}

// Without java the start fails at once with one line that says what to install.
func TestDynamoLocalWithoutJavaSaysWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := StartDynamoLocal(context.Background(), DynamoLocalOptions{})
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "install a JRE") {
		t.Fatalf("err = %v", err)
	}
}

// Each namespace has its own tables, and closing one leaves the others.
func TestDynamoLocalNamespacesAreApart(t *testing.T) {
	l, err := sharedLocal.get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.Namespace(t.Context(), "one")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Namespace(t.Context(), "one")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a.Close()
	out, err := b.Client(t.Context()).ListTables(t.Context(), nil)
	if err != nil || len(out.TableNames) != 1 {
		t.Fatalf("the other namespace after one closed: %v %v", out, err)
	}
	if out, err := a.Client(t.Context()).ListTables(t.Context(), nil); err != nil || len(out.TableNames) != 0 {
		t.Fatalf("the closed namespace: %v %v", out, err)
	}
}
