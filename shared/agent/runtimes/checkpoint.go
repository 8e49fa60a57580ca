package runtimes

import "context"

// Checkpointer is what a Handle implements when its environments can be
// checkpointed (docs/nodes.md, "Checkpoints"): the agent freezes the
// environment, packs what it changed, and thaws it.
type Checkpointer interface {
	// CheckpointDir is the folder of the node that holds the environment's
	// changes: a process's folder, a container's overlay upper layer.
	CheckpointDir() string
	// Freeze stops every process of the environment until thaw is called;
	// how says by what, for the checkpoint's manifest.
	Freeze(ctx context.Context) (thaw func() error, how string, err error)
}
