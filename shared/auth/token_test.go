package auth_test

import (
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/auth"
)

func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		tok, prefix, hash := auth.NewToken(auth.PrefixCLI)
		if !strings.HasPrefix(tok, "els_cli_") || len(tok) != len("els_cli_")+43 {
			t.Fatalf("token %q", tok)
		}
		if !strings.HasPrefix(tok, prefix) || len(hash) != 64 || hash != auth.HashToken(tok) {
			t.Fatalf("prefix %q hash %q", prefix, hash)
		}
		if seen[tok] {
			t.Fatal("repeated token")
		}
		seen[tok] = true
	}
}

func TestParseBearer(t *testing.T) {
	cases := []struct {
		header, token string
		ok            bool
	}{
		{"Bearer els_cli_abcdefghijklmnop", "els_cli_abcdefghijklmnop", true},
		{"bearer els_cli_abcdefghijklmnop", "els_cli_abcdefghijklmnop", true},
		{"Bearer ", "", false},
		{"Basic dXNlcjpwYXNz", "", false},
		{"Bearer short", "", false},
		{"Bearer els_cli_abcdefgh ijklmnop", "", false},
		{"Bearer els_cli_abcdefghijklmnop\x00", "", false},
		{"Bearer " + strings.Repeat("a", 300), "", false},
		{"", "", false},
	}
	for _, c := range cases {
		tok, ok := auth.ParseBearer(c.header)
		if ok != c.ok || tok != c.token {
			t.Errorf("%q: got %q %v", c.header, tok, ok)
		}
	}
}

func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{"Bearer els_cli_abcdefghijklmnop", "Bearer ", "bearer x", "", "Bearer \xff\xfe0123456789abcdef"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok, ok := auth.ParseBearer(header)
		if ok && (len(tok) < 16 || strings.ContainsAny(tok, " \t\r\n")) {
			t.Fatalf("accepted %q", tok)
		}
	})
}
