// Command infra is the CDK app: it builds the Lambda binaries, defines the
// Envlease stack and synthesizes it into cdk.out. cdk.json runs it for the
// CDK CLI; `go run ./infra` does the same without the CLI.
//
//	go run ./infra              # cdk.out/Envlease.template.json and assets
//	go run ./infra -sam-local   # the same, with AWS_ENDPOINT_URL[_S3] declared for sam local --env-vars
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/aws/jsii-runtime-go"

	"github.com/envlease/envlease/infra/bundle"
)

func main() {
	samLocal := flag.Bool("sam-local", false, "declare AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_S3 on every function so sam local --env-vars can point them at a local stack (same as -c "+ctxSAMLocal+"=true)")
	flag.Parse()
	err := run(*samLocal)
	jsii.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
}

func run(samLocal bool) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := bundle.FindRoot(wd)
	if err != nil {
		return err
	}
	built, err := bundle.Build(context.Background(), bundle.Options{
		Root:      root,
		Functions: GroupNames(Groups),
		Log:       os.Stderr,
	})
	if err != nil {
		return err
	}
	opts := appOptions{Root: root, Groups: Groups, AssetDirs: built.Dirs, NagReports: true}
	if samLocal {
		opts.Context = map[string]interface{}{ctxSAMLocal: true}
	}
	start := time.Now()
	app, _, err := newApp(opts)
	if err != nil {
		return err
	}
	asm := app.Synth(nil)
	fmt.Fprintf(os.Stderr, "synthesized %s into %s in %s\n", StackName, *asm.Directory(), time.Since(start).Round(10*time.Millisecond))
	return nil
}
