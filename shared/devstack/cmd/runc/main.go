// Command runc installs the runc release the project pins (building it from
// its module the first time) and prints its path and version:
//
//	go run ./shared/devstack/cmd/runc            # path, then "runc version 1.5.3"
//	go run ./shared/devstack/cmd/runc -version   # the version line only
//
// A node's operator runs it once (as the user the agent runs as, root); the
// agent then finds the build by itself.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/envlease/envlease/shared/devstack"
)

func main() {
	versionOnly := flag.Bool("version", false, "print only runc's version line")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	bin, err := devstack.RuncBinary(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	v, err := devstack.RuncVersion(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if !*versionOnly {
		fmt.Println(bin)
	}
	fmt.Println(v)
}
