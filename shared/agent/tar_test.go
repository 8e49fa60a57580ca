package agent_test

import (
	"bytes"
	"github.com/envlease/envlease/shared/agent/archive/archivetest"
	"testing"
)

// The members of test archives, and the archive of them (archivetest).
type entry = archivetest.Entry

var (
	file     = archivetest.File
	dir      = archivetest.Dir
	symlink  = archivetest.Symlink
	hardlink = archivetest.Hardlink
)

func tarOf(t *testing.T, entries ...entry) *bytes.Buffer { return archivetest.Tar(t, entries...) }
