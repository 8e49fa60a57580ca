package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/clienttest"
)

// The operator's smoke run, against the in-process stack the dev server
// runs (with a node agent per pool), so the script cannot rot.
func TestSmokeAgainstDevStack(t *testing.T) {
	s := clienttest.Start(t)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(clienttest.AliceToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, []string{"-url", s.URL, "-token-file", file, "-ready-timeout", "3m"}); err != nil {
		t.Fatal(err)
	}
}

func TestSmokeToken(t *testing.T) {
	t.Setenv(TokenEnv, "")
	if _, err := readToken(""); err == nil || !strings.Contains(err.Error(), TokenEnv) {
		t.Errorf("no token: %v", err)
	}
	t.Setenv(TokenEnv, " els_x \n")
	if tok, err := readToken(""); err != nil || tok != "els_x" {
		t.Errorf("from the environment: %q %v", tok, err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	if _, err := readToken(empty); err == nil {
		t.Error("an empty token file was taken")
	}
	shared := filepath.Join(t.TempDir(), "shared")
	os.WriteFile(shared, []byte("els_x"), 0o644)
	if _, err := readToken(shared); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a token file others can read: %v", err)
	}
	// A token is never a flag: there is no -token to put one on argv.
	if err := run(context.Background(), []string{"-url", "http://127.0.0.1:1", "-token", "els_x"}); err == nil {
		t.Error("-token was accepted")
	}
}
