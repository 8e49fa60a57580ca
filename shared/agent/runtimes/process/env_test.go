package process

import (
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/agent/confine"
	"github.com/envlease/envlease/shared/domain"
)

// The proxy's environment, and the template's env overriding it.
func TestEgressEnv(t *testing.T) {
	var r Runtime
	b := &confine.Box{Root: "/envs/x"}
	env := strings.Join(r.processEnv(templateWithEnv(map[string]string{"NO_PROXY": "example.internal"}), b, nil, nil, 3128, ""), "\n")
	for _, want := range []string{
		"HTTP_PROXY=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128", "http_proxy=http://127.0.0.1:3128",
		"https_proxy=http://127.0.0.1:3128", "ALL_PROXY=http://127.0.0.1:3128", "no_proxy=localhost,127.0.0.1,::1",
		"NO_PROXY=example.internal",
	} {
		if !strings.Contains(env+"\n", want+"\n") {
			t.Errorf("environment lacks %s:\n%s", want, env)
		}
	}
	if strings.Count(env, "NO_PROXY=") != 1 {
		t.Errorf("NO_PROXY twice:\n%s", env)
	}
	if env := strings.Join(r.processEnv(templateWithEnv(nil), b, nil, nil, 0, ""), "\n"); strings.Contains(strings.ToLower(env), "proxy") {
		t.Errorf("an environment without egress is told of a proxy:\n%s", env)
	}
}

func templateWithEnv(env map[string]string) domain.Template {
	return domain.Template{Name: "t", Command: []string{"true"}, Env: env}
}
