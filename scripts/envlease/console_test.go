package main

import (
	"bytes"
	"strings"
	"testing"
)

// The token goes in the fragment, which the browser keeps to itself, and the
// address printed carries none.
func TestConsoleOpensSignedIn(t *testing.T) {
	var opened string
	saved := openBrowser
	openBrowser = func(u string) error { opened = u; return nil }
	t.Cleanup(func() { openBrowser = saved })
	env := map[string]string{"ENVLEASE_URL": "http://127.0.0.1:9/", "ENVLEASE_TOKEN": "els_dev_x_123", "HOME": t.TempDir(), "XDG_CONFIG_HOME": t.TempDir()}
	var out, errb bytes.Buffer
	code := run([]string{"console"}, strings.NewReader(""), &out, &errb, func(k string) string { return env[k] })
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if opened != "http://127.0.0.1:9/#token=els_dev_x_123" {
		t.Errorf("opened %q", opened)
	}
	if strings.Contains(errb.String()+out.String(), "els_dev_x_123") {
		t.Errorf("the token was printed: %s%s", out.String(), errb.String())
	}
}
