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
// other process of the namespace with it. The command is started through a
// second marker (envlease-nsexec): that process sets the template's
// rlimits and CPU affinity on itself, becomes the environment's user (no
// supplementary groups, no_new_privs) and execs the command, so they hold
// from the command's first instruction. See docs/nodes.md.
package nsinit
