// Command build compiles the Lambda bootstrap binaries for linux/arm64 into
// build/lambda/<name>/bootstrap, exactly as the CDK app does before synth.
//
//	go run ./scripts/build              # every functions/<name>
//	go run ./scripts/build tokens keys  # only these
//	go run ./scripts/build -out DIR     # another output folder
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/envlease/envlease/infra/bundle"
)

func main() {
	out := flag.String("out", bundle.DefaultOutDir, "output folder, relative to the repository root unless absolute")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./scripts/build [-out DIR] [function ...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out string, names []string) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := bundle.FindRoot(wd)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		if names, err = bundle.Discover(root); err != nil {
			return err
		}
		if len(names) == 0 {
			return fmt.Errorf("no functions/<name>/main.go under %s", root)
		}
	}
	res, err := bundle.Build(ctx, bundle.Options{Root: root, OutDir: out, Functions: names, Log: os.Stderr})
	if err != nil {
		return err
	}
	for _, n := range names {
		fmt.Println(res.Dirs[n])
	}
	return nil
}
