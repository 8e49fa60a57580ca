// Command smoke checks a deployed envlease stack end to end, as an operator
// would after a deploy:
//
//	ENVLEASE_TOKEN=els_... go run ./scripts/smoke -url https://api.example.com
//	go run ./scripts/smoke -url https://... -token-file ~/.envlease-admin-token
//
// With an organization admin's token (from ENVLEASE_TOKEN or -token-file,
// never the command line, where other users of the machine could read it)
// it issues a token of its own, leases an environment and waits until a node
// of the pool makes it ready, pushes and pulls an artifact, reads the
// environment's events, then deletes the environment and revokes the token.
// A node must be registered and running in the pool first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/envlease/envlease/shared/smoke"
)

// TokenEnv is the variable the admin token is read from.
const TokenEnv = "ENVLEASE_TOKEN"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "smoke:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("smoke", flag.ContinueOnError)
	url := fs.String("url", "", "the API's base URL (the stack's ApiUrl output)")
	tokenFile := fs.String("token-file", "", "file holding an organization admin's token (default: $"+TokenEnv+")")
	tpl := fs.String("template", "", "template to lease (default: the organization's first)")
	pool := fs.String("pool", "", "pool to lease on (default: the template's first)")
	ready := fs.Duration("ready-timeout", 5*time.Minute, "how long to wait for a node to make the lease ready")
	size := fs.Int64("artifact-size", 1<<20, "bytes of the artifact round trip")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("-url is required, and nothing else is taken")
	}
	token, err := readToken(*tokenFile)
	if err != nil {
		return err
	}
	rep, err := smoke.Run(ctx, smoke.Config{
		URL: *url, Token: token, Template: *tpl, Pool: *pool,
		ReadyTimeout: *ready, ArtifactSize: *size, Log: os.Stderr,
	})
	if err != nil {
		return err
	}
	fmt.Printf("ok: %s ready in %s, artifact %s, %d events\n", rep.Environment, rep.ReadyIn.Round(time.Millisecond), rep.Artifact, rep.Events)
	return nil
}

func readToken(file string) (string, error) {
	if file != "" {
		// An admin token is the organization's keys: a file others can
		// read is refused, as the agent refuses its credential's.
		st, err := os.Stat(file)
		if err != nil {
			return "", err
		}
		if perm := st.Mode().Perm(); perm&0o077 != 0 {
			return "", fmt.Errorf("token file %s has mode %04o: group or others may read it; chmod 600 %s", file, perm, file)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("%s is empty", file)
	}
	if t := strings.TrimSpace(os.Getenv(TokenEnv)); t != "" {
		return t, nil
	}
	return "", fmt.Errorf("no admin token: set %s or give -token-file", TokenEnv)
}
