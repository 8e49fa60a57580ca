// Package ctrinit is the first process (PID 1) of a container: the user's
// command as PID 1 would ignore SIGTERM unless it handles it (a shell does
// not) and leave the orphans of its children unreaped. The agent's own
// binary serves as the init: the container runtime binds it read-only into
// the container at Path (with its loader and libraries when it is linked
// dynamically) and runs it with the command as arguments; the package's
// init function recognises Path as argv[0] in PID 1, whatever binary
// imports the package (the agent, a test binary), and runs the init
// instead of the program. The init starts the command, forwards every
// signal it gets to it, reaps every process that ends, and exits once the
// command ended: with its status, or 128+n when signal n killed it.
package ctrinit

// Dir holds everything of the init inside a container. Its files are
// mount points: whatever is unpacked into the container must not replace
// them (a replaced mount point loses its mount), so checkpoints neither
// pack nor restore it.
const Dir = "/.envlease"

// Path is where the init is found inside a container, and its argv[0].
const Path = Dir + "/init"

// libDir holds the loader and libraries of a dynamically linked init.
const libDir = Dir + "/lib"
