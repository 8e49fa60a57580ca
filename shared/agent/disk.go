package agent

import (
	"github.com/envlease/envlease/shared/agent/archive"

	"fmt"
	"strconv"
	"strings"

	"github.com/envlease/envlease/shared/bytesize"
)

// DiskSpace is what the filesystem holding the agent's work dir has.
type DiskSpace struct {
	// FreeBytes is what an unprivileged user may still write.
	FreeBytes, TotalBytes uint64
	// TotalInodes is 0 on a filesystem that does not count them (btrfs):
	// then free inodes are not judged.
	FreeInodes, TotalInodes uint64
}

// Statfs reads the DiskSpace of the filesystem holding dir. Config.Statfs
// replaces it in tests, to simulate a full disk.
type Statfs func(dir string) (DiskSpace, error)

// Threshold is a floor of free space or free inodes: an amount, or a
// percentage of the filesystem's total. The zero Threshold takes the
// default; ParseThreshold("0") is a floor of nothing (the check is off).
type Threshold struct {
	Amount  uint64
	Percent float64
	set     bool
}

// Default floors below which the agent claims nothing. 1 GiB leaves the
// node room for its logs, the agent's downloads and the environments
// already running; 5% of the inodes is some 26,000 on an 8 GiB ext4 volume
// and millions on a large one.
var (
	DefaultMinFreeDisk   = Threshold{Amount: 1 << 30, set: true}
	DefaultMinFreeInodes = Threshold{Percent: 5, set: true}
)

// ParseThreshold reads "5%", or an amount: a count of inodes, or with
// size, a size such as 512Mi or 2G.
func ParseThreshold(s string, size bool) (Threshold, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || f < 0 || f > 100 {
			return Threshold{}, fmt.Errorf("%q: a percentage is 0%% to 100%%", s)
		}
		return Threshold{Percent: f, set: true}, nil
	}
	if s == "0" {
		return Threshold{set: true}, nil
	}
	if size {
		n, err := bytesize.Parse(s)
		if err != nil {
			return Threshold{}, fmt.Errorf("%q: %v, or a percentage such as 5%%", s, err)
		}
		return Threshold{Amount: n, set: true}, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return Threshold{}, fmt.Errorf("%q: a count such as 10000, or a percentage such as 5%%", s)
	}
	return Threshold{Amount: n, set: true}, nil
}

func (t Threshold) or(def Threshold) Threshold {
	if !t.set && t.Amount == 0 && t.Percent == 0 {
		return def
	}
	t.set = true
	return t
}

// floor is the threshold on a filesystem of total.
func (t Threshold) floor(total uint64) uint64 {
	if t.Percent > 0 {
		return uint64(float64(total) * t.Percent / 100)
	}
	return t.Amount
}

// text writes the threshold as the flag takes it; size says how an amount
// reads.
func (t Threshold) text(size bool) string {
	switch {
	case t.Percent > 0:
		return strconv.FormatFloat(t.Percent, 'f', -1, 64) + "%"
	case size:
		return archive.SizeText(int64(min(t.Amount, 1<<62)))
	}
	return strconv.FormatUint(t.Amount, 10)
}

// errNoRoom marks the refusals of a node short of disk or inodes; an
// unpacking that meets it passes it on as it is.
var errNoRoom = archive.ErrNoRoom

// room says why the node has no room for more environments' files, or nil:
// the free space or free inodes of the work dir's filesystem are below the
// configured floors. A filesystem that cannot be read is not judged: the
// writes then fail on their own.
func (a *Agent) room() error { return a.roomFor(0) }

// roomFor is room for need bytes more: the floor must hold after they are
// written.
func (a *Agent) roomFor(need uint64) error {
	d, err := a.cfg.Statfs(a.cfg.WorkDir)
	if err != nil || d.TotalBytes == 0 {
		return nil
	}
	if floor := a.cfg.MinFreeDisk.floor(d.TotalBytes); d.FreeBytes < floor || d.FreeBytes-floor < need {
		return fmt.Errorf("%w: %s free of %s in the agent's work dir, below %s (agent limit -min-free-disk)",
			errNoRoom, archive.SizeText(int64(min(d.FreeBytes, 1<<62))), archive.SizeText(int64(min(d.TotalBytes, 1<<62))), a.cfg.MinFreeDisk.text(true))
	}
	if floor := a.cfg.MinFreeInodes.floor(d.TotalInodes); d.TotalInodes > 0 && d.FreeInodes < floor {
		return fmt.Errorf("%w: %d free inodes of %d in the agent's work dir, below %s (agent limit -min-free-inodes)",
			errNoRoom, d.FreeInodes, d.TotalInodes, a.cfg.MinFreeInodes.text(false))
	}
	return nil
}

// noRoom is room, remembered: the first refusal after room was found is
// logged as a warning, and the first room after refusals as news, so a
// node that stays short logs once rather than per claim.
func (a *Agent) noRoom() error {
	err := a.room()
	if was := a.short.Swap(err != nil); was != (err != nil) {
		if err != nil {
			a.log.Warn("claiming no environments: the node is short of disk", "err", err.Error())
		} else {
			a.log.Info("claiming again: the node has room", "min_free_disk", a.cfg.MinFreeDisk.text(true), "min_free_inodes", a.cfg.MinFreeInodes.text(false))
		}
	}
	return err
}

// ParseSize reads a size such as 8Gi, 500M or 1048576 (K, M, G, T are
// powers of 1000; Ki, Mi, Gi, Ti of 1024).
func ParseSize(s string) (int64, error) {
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("%q: %v", s, err)
	}
	if n > 1<<62 {
		return 0, fmt.Errorf("%q: too large", s)
	}
	return int64(n), nil
}
