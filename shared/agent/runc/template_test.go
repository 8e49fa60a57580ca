package runc

import (
	"reflect"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/envlease/envlease/shared/domain"
)

func TestFromTemplate(t *testing.T) {
	full := domain.Template{
		Command:   []string{"/app/run"},
		Env:       map[string]string{"B": "2", "A": "1", "PATH": "/app/bin"},
		Workdir:   "src/app/",
		Writable:  []string{"/var/cache/app"},
		Shares:    []domain.TemplateShare{{Name: "code", Path: "code"}, {Name: "data", Path: "/data"}},
		Resources: domain.Resources{CPUs: 2, PIDs: 256},
	}
	img := v1.Config{Entrypoint: []string{"/entry"}, Cmd: []string{"serve"}, Env: []string{"PATH=/usr/bin", "LANG=C"},
		WorkingDir: "/srv", User: "1000:1001"}
	for _, tc := range []struct {
		name string
		t    domain.Template
		img  v1.Config
		mem  int64
		want Config
		err  string
	}{
		{"bare template, bare image", domain.Template{Command: []string{"sleep", "1"}}, v1.Config{}, 0,
			Config{ID: "e", ReadOnly: true, Args: []string{"sleep", "1"}}, ""},
		{"template wins", full, img, 1 << 30,
			Config{ID: "e", ReadOnly: true, Args: []string{"/app/run"}, Env: []string{"PATH=/app/bin", "LANG=C", "A=1", "B=2"},
				Cwd: "/src/app", UID: 1000, GID: 1001,
				Writable:  []string{"/var/cache/app", "/src/app/code", "/data", "/src/app"},
				Resources: Resources{MemoryBytes: 1 << 30, Pids: 256, CPUs: 2}}, ""},
		{"image fills in", domain.Template{}, img, 0,
			Config{ID: "e", ReadOnly: true, Args: []string{"/entry", "serve"}, Env: []string{"PATH=/usr/bin", "LANG=C"},
				Cwd: "/srv", UID: 1000, GID: 1001, Writable: []string{"/srv"}}, ""},
		{"no command at all", domain.Template{Name: "t"}, v1.Config{}, 0, Config{}, "no command"},
		{"user by name", domain.Template{Command: []string{"x"}}, v1.Config{User: "app"}, 0, Config{}, "numeric"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromTemplate("e", tc.t, tc.img, tc.mem)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
