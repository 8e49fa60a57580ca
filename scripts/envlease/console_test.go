package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/clienttest"
)

// console runs `envlease console` in-process with the browser opener
// replaced: the opener gets a file, whose path is returned with the address
// the file sends the browser to. use, when set, is called with that address
// while the command waits (as the page would spend the code); the command's
// exit code and standard error are returned once it ends.
func console(t *testing.T, base, token string, use func(address string)) (file, opened string, code int, stderr string) {
	t.Helper()
	saved, savedPoll := openBrowser, signInPoll
	signInPoll = 20 * time.Millisecond
	got := make(chan string, 1)
	openBrowser = func(path string) error {
		file = path
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("the sign-in page %s: %v %v, want mode 0600", path, fi.Mode(), err)
		}
		m := regexp.MustCompile(`href="([^"]+)"`).FindSubmatch(b)
		if m == nil {
			return fmt.Errorf("no address in the sign-in page:\n%s", b)
		}
		got <- html.UnescapeString(string(m[1]))
		return nil
	}
	t.Cleanup(func() { openBrowser, signInPoll = saved, savedPoll })
	env := map[string]string{"ENVLEASE_URL": base, "ENVLEASE_TOKEN": token, "HOME": t.TempDir(), "XDG_CONFIG_HOME": t.TempDir(), "DISPLAY": ":0"}
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"console"}, strings.NewReader(""), &out, &errb, func(k string) string { return env[k] })
	}()
	select {
	case opened = <-got:
		if use != nil {
			use(opened)
		}
		code = <-done
	case code = <-done:
	}
	if strings.Contains(errb.String()+out.String(), token) {
		t.Errorf("the token was printed: %s%s", out.String(), errb.String())
	}
	return file, opened, code, errb.String()
}

// The browser is opened with a sign-in code, never the token: the opener's
// arguments are readable by every user of the machine. The code works once.
func TestConsoleOpensWithASignInCode(t *testing.T) {
	s := clienttest.Start(t)
	ctx := context.Background()
	anon, err := client.New(s.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	var signIn string
	var issued client.IssuedKey
	file, opened, code, stderr := console(t, s.URL, clienttest.AliceToken, func(address string) {
		rest, ok := strings.CutPrefix(address, s.URL+"/#code=elc_")
		if !ok || strings.Contains(address, clienttest.AliceToken) || strings.Contains(address, "token") {
			t.Errorf("the page sends the browser to %q", address)
			return
		}
		signIn = "elc_" + rest
		if issued, err = anon.ExchangeConsoleCode(ctx, signIn); err != nil {
			t.Errorf("exchange: %v", err)
		}
	})
	if code != 0 || !strings.Contains(stderr, "has used its sign-in code") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(file, "elc_") || opened == "" {
		t.Fatalf("the opener got %q", file)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("the sign-in page is left once used: %v", err)
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
	_, opened, code, stderr := console(t, s.URL, key.Token, nil)
	if code == 0 || opened != "" || !strings.Contains(stderr, "organization API key") {
		t.Fatalf("exit %d, opened %q: %s", code, opened, stderr)
	}
}

// Without a display the sign-in address is printed, with how long it
// works, and no browser is started.
func TestConsoleWithoutADisplayPrintsTheAddress(t *testing.T) {
	s := clienttest.Start(t)
	saved := openBrowser
	openBrowser = func(string) error { t.Error("a browser was started without a display"); return nil }
	t.Cleanup(func() { openBrowser = saved })
	env := map[string]string{"ENVLEASE_URL": s.URL, "ENVLEASE_TOKEN": clienttest.AliceToken, "HOME": t.TempDir(), "XDG_CONFIG_HOME": t.TempDir()}
	var out, errb bytes.Buffer
	if code := run([]string{"console"}, strings.NewReader(""), &out, &errb, func(k string) string { return env[k] }); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	contains(t, "console's message", errb.String(), "No display", "within 60 seconds", s.URL+"/#code=elc_", "signs in once")
}
