package domain

import "time"

// Checkpoint states. A checkpoint is asked for (packing: its node packs the
// environment's files, then uploads them), and ends sealed (Artifact names
// the sealed artifact) or failed (Error says why).
const (
	CheckpointPacking = "packing"
	CheckpointSealed  = "sealed"
	CheckpointFailed  = "failed"
)

// CheckpointContentType marks an artifact that holds a checkpoint: a tar,
// zstd-compressed, of an environment's filesystem changes whose last entry
// is the manifest of every file (CheckpointManifestEntry). A lease whose
// snapshot is such an artifact is restored and verified file by file.
const CheckpointContentType = "application/vnd.envlease.checkpoint+tar+zstd"

// CheckpointManifestEntry is the name of the manifest's tar entry: absolute,
// so no file of an environment (packed with relative names, and refused by
// the unpacker otherwise) can ever have it.
const CheckpointManifestEntry = "/envlease/checkpoint-manifest.json"

// Labels a checkpoint's artifact carries: the environment it was taken of
// and the template it came from (what `envlease resume` leases).
const (
	LabelCheckpointOf       = "envlease.checkpoint-of"
	LabelCheckpointTemplate = "envlease.template"
)

// Checkpoint is the latest checkpoint asked of an environment, kept on its
// record (one at a time: a second is refused while one is packing).
type Checkpoint struct {
	ID          string `json:"id"`
	Environment string `json:"environment"`
	State       string `json:"state"`
	// Name and Expires are what the artifact is created with.
	Name    string `json:"name"`
	Expires string `json:"expires,omitempty"`
	// Artifact is the artifact's id, once the node asked to upload it.
	Artifact string `json:"artifact,omitempty"`
	// Files and Bytes count the regular files packed and their bytes.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// Size is the archive's size, as stored (compressed); 0 until its node
	// asked to upload it.
	Size  int64  `json:"size,omitempty"`
	Error string `json:"error,omitempty"`
	// CreatedBy asked for it; the artifact is created as theirs.
	CreatedBy string `json:"createdBy"`
	// Pause marks the checkpoint the timeout job asked for to pause an
	// idle environment: once sealed the environment becomes paused.
	Pause     bool       `json:"pause,omitempty"`
	Requested time.Time  `json:"requested"`
	Sealed    *time.Time `json:"sealed"`
}

// Done says whether the checkpoint has ended (sealed or failed).
func (c Checkpoint) Done() bool { return c.State == CheckpointSealed || c.State == CheckpointFailed }

// CheckpointFile is one entry of a checkpoint's manifest.
type CheckpointFile struct {
	// Path is relative to the root the checkpoint was taken at, with "/".
	Path string `json:"path"`
	// Type is file, dir or symlink.
	Type string `json:"type"`
	// Mode holds the permission bits (0777) only.
	Mode uint32 `json:"mode"`
	Size int64  `json:"size"`
	// SHA256 is a regular file's content's digest (hex).
	SHA256 string `json:"sha256,omitempty"`
	// Target is a symbolic link's target.
	Target string `json:"target,omitempty"`
}

// CheckpointManifest describes every file of a checkpoint.
type CheckpointManifest struct {
	Version     int       `json:"version"`
	Environment string    `json:"environment"`
	Template    string    `json:"template"`
	Runtime     string    `json:"runtime"`
	Created     time.Time `json:"created"`
	// Frozen says how the files were kept still while packed ("cgroup
	// freezer", "runc pause").
	Frozen string           `json:"frozen"`
	Files  []CheckpointFile `json:"files"`
	// Skipped are entries that cannot be restored (sockets, fifos, device
	// files, an overlay's whiteouts), by path.
	Skipped []string `json:"skipped,omitempty"`
}

// Checkpoint file types.
const (
	CheckpointTypeFile    = "file"
	CheckpointTypeDir     = "dir"
	CheckpointTypeSymlink = "symlink"
)
