package runtimes

import (
	"fmt"
	"path/filepath"
	"strings"
)

// WorkdirIn places a template's workdir under root: a relative one inside
// it, an absolute one too (/workspace -> <root>/workspace), never outside.
func WorkdirIn(root, workdir string) (string, error) {
	for _, part := range strings.FieldsFunc(workdir, func(r rune) bool { return r == '/' || r == '\\' }) {
		if part == ".." {
			return "", fmt.Errorf("workdir %q leaves the environment's folder", workdir)
		}
	}
	return filepath.Join(root, filepath.Clean("/"+workdir)), nil
}
