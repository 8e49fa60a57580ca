// Command agent is the reference node agent: it runs the environments of one
// pool as local processes (runtime "process"). See shared/agent and the
// README section "Nodes and the reference agent".
//
//	agent -api https://api.example -address 10.0.3.7 -workdir /var/lib/envlease
//
// The node credential comes from -token or, better (it stays out of the
// process list), from the ENVLEASE_NODE_TOKEN environment variable; an admin
// issues it with POST /v1/nodes/credentials.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/platform"
)

func main() {
	api := flag.String("api", "http://127.0.0.1:8080", "base URL of the envlease API")
	token := flag.String("token", "", "node credential (default: $ENVLEASE_NODE_TOKEN)")
	address := flag.String("address", "127.0.0.1", "host clients reach this node's environments at (the pool address); export targets are address:port")
	workDir := flag.String("workdir", "", "folder for the environments' folders (default: a temporary folder)")
	name := flag.String("name", "", "node name (default: the host name)")
	capacity := flag.Int("capacity", 8, "environments run at once (warm processes not counted)")
	grace := flag.Duration("grace", 10*time.Second, "time between SIGTERM and SIGKILL when an environment stops")
	readyTimeout := flag.Duration("ready-timeout", 2*time.Minute, "how long every export has to accept connections")
	noWarm := flag.Bool("no-warm", false, "do not keep warm processes")
	keep := flag.Bool("keep", false, "keep an environment's folder after it ends")
	logLevel := flag.String("log", "info", "log level: debug, info, warn, error")
	flag.Parse()

	log := platform.Logger(os.Stderr, *logLevel)
	if *token == "" {
		*token = os.Getenv("ENVLEASE_NODE_TOKEN")
	}
	if *workDir == "" {
		dir, err := os.MkdirTemp("", "envlease-agent-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "agent:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
		*workDir = dir
	}
	a, err := agent.New(agent.Config{
		API: *api, Token: *token, Address: *address, WorkDir: *workDir, Name: *name, Capacity: *capacity,
		Grace: *grace, ReadyTimeout: *readyTimeout, NoWarm: *noWarm, KeepRoots: *keep, Log: log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err, "(a node credential is needed: -token or ENVLEASE_NODE_TOKEN)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}
