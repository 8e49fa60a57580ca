//go:build linux

package nsinit_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/envlease/envlease/shared/agent/nsinit"
)

// BenchmarkStartInNamespaces is what running a command under an init in
// namespaces of its own costs, start to exit: compare BenchmarkStartPlain.
//
//	go test ./shared/agent/nsinit -run X -bench Start -benchtime 100x
func BenchmarkStartInNamespaces(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("namespaces take root")
	}
	for i := 0; i < b.N; i++ {
		c, err := nsinit.Command(nsinit.Config{Path: "/bin/true", Args: []string{"true"}, Dir: "/", UID: -1, GID: -1})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Begin(); err != nil {
			b.Fatal(err)
		}
		if err := c.Wait(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStartPlain runs the same command without namespaces.
func BenchmarkStartPlain(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
