package bundle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fakeRepo(t *testing.T, functions ...string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module "+Module+"\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range functions {
		dir := filepath.Join(root, FunctionsDir, f)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestMissingFunctionIsNamed(t *testing.T) {
	root := fakeRepo(t, "tokens")
	_, err := Build(context.Background(), Options{Root: root, OutDir: t.TempDir(), Functions: []string{"tokens", "usage", "docs"}})
	var me *MissingError
	if !errors.As(err, &me) {
		t.Fatalf("err = %v, want a MissingError", err)
	}
	if strings.Join(me.Missing, ",") != "docs,usage" {
		t.Errorf("missing = %v", me.Missing)
	}
	if !strings.Contains(err.Error(), "functions/usage/main.go") {
		t.Errorf("message does not name the expected file: %v", err)
	}
}

func TestBadNames(t *testing.T) {
	root := fakeRepo(t, "a")
	for _, names := range [][]string{{"../a"}, {"a", "a"}, {""}, nil} {
		if _, err := Build(context.Background(), Options{Root: root, Functions: names}); err == nil {
			t.Errorf("Build(%q) succeeded", names)
		}
	}
}

func TestBuildPlacesBootstraps(t *testing.T) {
	root := fakeRepo(t, "one", "two")
	out := filepath.Join(t.TempDir(), "lambda")
	res, err := Build(context.Background(), Options{Root: root, OutDir: out, Functions: []string{"two", "one"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"one", "two"} {
		entries, err := os.ReadDir(res.Dirs[n])
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != "bootstrap" {
			t.Errorf("%s: asset folder holds %v, want only bootstrap", n, entries)
		}
		fi, err := os.Stat(filepath.Join(res.Dirs[n], "bootstrap"))
		if err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s: bootstrap not executable: %v", n, err)
		}
		// An ELF binary for arm64: e_machine 0xB7 (AArch64) at offset 18.
		b, _ := os.ReadFile(filepath.Join(res.Dirs[n], "bootstrap"))
		if len(b) < 20 || string(b[1:4]) != "ELF" || b[18] != 0xB7 {
			t.Errorf("%s: bootstrap is not a linux/arm64 ELF", n)
		}
	}
}

func TestFindRootAndDiscover(t *testing.T) {
	root := fakeRepo(t, "b", "a")
	deep := filepath.Join(root, FunctionsDir, "a")
	got, err := FindRoot(deep)
	if err != nil || got != root {
		t.Fatalf("FindRoot = %q, %v; want %q", got, err, root)
	}
	names, err := Discover(root)
	if err != nil || strings.Join(names, ",") != "a,b" {
		t.Errorf("Discover = %v, %v", names, err)
	}
}
