// Package nsinit is the first process of an environment that runs in
// namespaces of its own (network, PID, mount, IPC; Linux, as root). Go
// cannot run code between clone and exec, so the agent starts its own
// binary again (/proc/self/exe) with a marker as argv[0]; the package's
// init function recognises the marker, whatever binary imports the package
// (the agent, the devserver, a test binary), and runs the environment's
// init instead of the program: it mounts a /proc of its PID namespace and a
// /dev/shm of its own (private to its mount namespace), brings up lo,
// starts the template's command, forwards signals to it, reaps orphans as
// PID 1 and exits with the command's status once it ends, which takes every
// other process of the namespace with it.
//
// The init starts the command itself, with one fork and exec, confined from
// its first instruction (spawn_linux.go: the user, no supplementary groups,
// no_new_privs, the CPU affinity and the limits), and runs the commands the
// agent asks for (envlease exec) the same way, as children of its own, over
// a socket pair it shares with the agent (Cmd.Exec, serve_linux.go). Where
// the kernel will not let it set a command's address-space limit that way,
// it starts a second stage (envlease-nsexec), the binary once more, which
// sets the limits on itself and execs the command. See docs/nodes.md.
package nsinit
