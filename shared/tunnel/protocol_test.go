package tunnel_test

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/envlease/envlease/shared/tunnel"
)

// A line protocol over the session bounds its lines: the tunnel's at
// MaxLine, another (exec's) at its own bound.
func TestLineBounds(t *testing.T) {
	long := map[string]string{"target": strings.Repeat("x", tunnel.MaxLine)}
	cases := []struct {
		name    string
		max     int
		v       any
		wantErr bool
	}{
		{"short line", tunnel.MaxLine, map[string]string{"target": "db:5432"}, false},
		{"over the tunnel's bound", tunnel.MaxLine, long, true},
		{"under a larger bound", 4 * tunnel.MaxLine, long, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := tunnel.WriteLineMax(&buf, c.v, c.max)
			if (err != nil) != c.wantErr {
				t.Fatalf("write: %v, want error %v", err, c.wantErr)
			}
			if err != nil {
				return
			}
			var got map[string]string
			if err := tunnel.ReadLineMax(bufio.NewReaderSize(&buf, 16), &got, c.max); err != nil || got["target"] != c.v.(map[string]string)["target"] {
				t.Fatalf("read back: %v %v", got, err)
			}
		})
	}
	// A reader refuses a line over its bound, whatever wrote it.
	var buf bytes.Buffer
	if err := tunnel.WriteLineMax(&buf, long, 4*tunnel.MaxLine); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := tunnel.ReadLine(bufio.NewReader(&buf), &got); err == nil {
		t.Fatal("ReadLine took a line over MaxLine")
	}
}
