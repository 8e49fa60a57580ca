package identity_test

import (
	"os"
	"testing"

	"github.com/envlease/envlease/shared/devstack"
)

// TestMain runs every test of the package against minidyn and then against
// DynamoDB Local (see devstack.RunTests).
func TestMain(m *testing.M) { os.Exit(devstack.RunTests(m)) }
