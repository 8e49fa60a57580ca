// Command testdeps brings the external packages the tests use to the version
// a new machine would get, and prints the version of each, so a test run on a
// machine that kept older packages says what it tested with (docs/local.md,
// "What the tests run on"). .ci/run runs it before the test command.
//
//	go run ./scripts/testdeps            # print the versions, installing what is missing
//	go run ./scripts/testdeps -upgrade   # as root: upgrade Debian's packages first
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/envlease/envlease/shared/devstack/testdeps"
)

func main() {
	upgrade := flag.Bool("upgrade", false, "as root, upgrade the Debian packages the tests use (apt-get update and install) before reading their versions")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var progress io.Writer = os.Stderr
	if *upgrade {
		if err := testdeps.Upgrade(ctx, progress); err != nil {
			fmt.Fprintln(os.Stderr, "testdeps:", err)
			os.Exit(1)
		}
	}
	fmt.Println("external packages the tests use:")
	for _, v := range testdeps.Versions(ctx, progress) {
		if v.Err != nil {
			// Not fatal here: the tests that need it fail and say how to get it.
			fmt.Printf("  %-15s MISSING: %v\n", v.Name, v.Err)
			continue
		}
		fmt.Printf("  %-15s %s\n", v.Name, v.Version)
	}
}
