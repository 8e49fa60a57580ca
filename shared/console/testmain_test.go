package console_test

import (
	"os"
	"testing"

	"github.com/envlease/envlease/shared/devstack"
)

// TestMain runs every test of the package against minidyn and then against
// DynamoDB Local (see devstack.RunTests): the browser tests drive the whole
// stack, store included.
func TestMain(m *testing.M) { os.Exit(devstack.RunTests(m)) }
