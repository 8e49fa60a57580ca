package devstack

import (
	"os"
	"testing"
)

// TestMain stops the DynamoDB Local process that a test of this package
// started; devstack's own tests run once, against what each test names.
func TestMain(m *testing.M) {
	code := m.Run()
	sharedLocal.stop()
	os.Exit(code)
}
