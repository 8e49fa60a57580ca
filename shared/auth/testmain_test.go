package auth_test

import (
	"os"
	"testing"

	"github.com/envlease/envlease/shared/devstack"
)

// TestMain runs every test of the package against minidyn and then against
// DynamoDB Local (see devstack.RunTests): the failure record's atomic
// append is DynamoDB semantics, not just minidyn's.
func TestMain(m *testing.M) { os.Exit(devstack.RunTests(m)) }
