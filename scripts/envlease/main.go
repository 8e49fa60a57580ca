// Command envlease is the command-line client of the envlease API: log in,
// lease and release environments, manage keys and tokens, and push and pull
// artifacts. Every command is in its own file; this one only wires.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}
