package runc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"
)

// Phase is where a container is in its life, as its state file records it.
type Phase string

const (
	// PhasePreparing: the folders and mounts are being made; runc has no
	// container yet (or is creating it).
	PhasePreparing Phase = "preparing"
	// PhaseCreated: runc created it; its process waits to be started.
	PhaseCreated Phase = "created"
	// PhaseRunning: started.
	PhaseRunning Phase = "running"
	// PhaseDeleting: teardown began.
	PhaseDeleting Phase = "deleting"
)

// State is the state file of one environment's container: written before
// each step that leaves something on the node, so that a restarted agent
// knows what to remove (Runtime.Recover).
type State struct {
	ID      string   `json:"id"`
	Phase   Phase    `json:"phase"`
	Rootfs  string   `json:"rootfs"`  // the overlay mount point
	Lower   string   `json:"lower"`   // the cached image root filesystem
	Cgroups []string `json:"cgroups"` // the container's cgroup folders
	Pid     int      `json:"pid,omitempty"`
	// Disk is the mount point of the container's disk and DiskImage its
	// image, when it has one.
	Disk      string    `json:"disk,omitempty"`
	DiskImage string    `json:"diskImage,omitempty"`
	Created   time.Time `json:"created"`
}

const stateFile = "state.json"

func writeState(dir string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(dir, stateFile)
	f, err := os.OpenFile(p+".new", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(p+".new", p)
}

func readState(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
