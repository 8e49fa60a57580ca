package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
)

// console runs `envlease console` in-process with the browser opener
// replaced, and returns what it would have opened.
func console(t *testing.T, base, token string) (opened string, code int, stderr string) {
	t.Helper()
	saved := openBrowser
	openBrowser = func(u string) error { opened = u; return nil }
	t.Cleanup(func() { openBrowser = saved })
	env := map[string]string{"ENVLEASE_URL": base, "ENVLEASE_TOKEN": token, "HOME": t.TempDir(), "XDG_CONFIG_HOME": t.TempDir()}
	var out, errb bytes.Buffer
	code = run([]string{"console"}, strings.NewReader(""), &out, &errb, func(k string) string { return env[k] })
	if strings.Contains(errb.String()+out.String(), token) {
		t.Errorf("the token was printed: %s%s", out.String(), errb.String())
	}
	return opened, code, errb.String()
}

// The browser is opened with a sign-in code, never the token: the opener's
// arguments are readable by every user of the machine. The code works once.
func TestConsoleOpensWithASignInCode(t *testing.T) {
	s := clienttest.Start(t)
	opened, code, stderr := console(t, s.URL, clienttest.AliceToken)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	signIn, ok := strings.CutPrefix(opened, s.URL+"/#code=elc_")
	if !ok || strings.Contains(opened, clienttest.AliceToken) || strings.Contains(opened, "token") {
		t.Fatalf("opened %q", opened)
	}
	signIn = "elc_" + signIn
	ctx := context.Background()
	anon, err := client.New(s.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	issued, err := anon.ExchangeConsoleCode(ctx, signIn)
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	if issued.APIKey.Source != "console" || issued.APIKey.Expires == nil || issued.Token == clienttest.AliceToken {
		t.Fatalf("console token: %+v", issued.APIKey)
	}
	c, _ := client.New(s.URL, issued.Token)
	if id, err := c.Whoami(ctx); err != nil || id.User != "alice" || id.Organization != "acme" {
		t.Fatalf("the console token is %+v, %v", id, err)
	}
	var apiErr *client.Error
	if _, err := anon.ExchangeConsoleCode(ctx, signIn); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Fatalf("second exchange: %v", err)
	}
}

// An organization key cannot ask for a code: the command says what to do.
func TestConsoleRefusesAnOrganizationKey(t *testing.T) {
	s := clienttest.Start(t)
	alice, _ := client.New(s.URL, clienttest.AliceToken)
	key, err := alice.CreateKey(context.Background(), "ci")
	if err != nil {
		t.Fatal(err)
	}
	opened, code, stderr := console(t, s.URL, key.Token)
	if code == 0 || opened != "" || !strings.Contains(stderr, "organization API key") {
		t.Fatalf("exit %d, opened %q: %s", code, opened, stderr)
	}
}
