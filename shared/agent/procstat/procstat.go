// Package procstat reads what a tree of processes uses from /proc: the
// process runtime's usage on a node where the agent has no cgroup of the
// environment's to read (docs/environments.md, "Metrics").
package procstat

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Usage is what a process tree uses.
type Usage struct {
	// CPUSeconds is user and system time of every process of the tree, and
	// of the children they waited for (a counter while the tree lives).
	CPUSeconds float64
	// RSSBytes is the sum of its processes' resident sets (shared pages
	// are counted once per process that maps them).
	RSSBytes int64
	// Processes counts them.
	Processes int
}

// clockTicks is USER_HZ, which /proc's times count in: 100 on every Linux
// architecture Go runs on.
const clockTicks = 100

type stat struct {
	ppid          int
	cpuTicks      int64
	childrenTicks int64
	rssPages      int64
}

// ErrNoProcess says the tree's root is gone.
var ErrNoProcess = errors.New("procstat: no such process")

// Snapshot is every process of a /proc at one moment.
type Snapshot struct {
	all      map[int]stat
	children map[int][]int
}

// Read reads every process of proc (normally /proc): one pass for all the
// trees a sampling round asks about (Cached).
func Read(proc string) (*Snapshot, error) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{all: map[int]stat{}, children: map[int][]int{}}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(filepath.Join(proc, e.Name(), "stat"))
		if err != nil {
			continue // gone since the listing
		}
		s.all[p] = st
		s.children[st.ppid] = append(s.children[st.ppid], p)
	}
	return s, nil
}

var cache struct {
	sync.Mutex
	at   time.Time
	snap *Snapshot
}

// Cached is Read of /proc, shared by the calls of the next maxAge: the
// agent samples every environment in a round, and /proc is read once per
// round rather than once per environment.
func Cached(maxAge time.Duration) (*Snapshot, error) {
	cache.Lock()
	defer cache.Unlock()
	if cache.snap != nil && time.Since(cache.at) < maxAge {
		return cache.snap, nil
	}
	s, err := Read("/proc")
	if err != nil {
		return nil, err
	}
	cache.snap, cache.at = s, time.Now()
	return s, nil
}

// Tree reads the tree of processes rooted at pid, in proc (normally /proc).
func Tree(proc string, pid int) (Usage, error) {
	s, err := Read(proc)
	if err != nil {
		return Usage{}, err
	}
	return s.Tree(pid)
}

// Tree is the usage of the tree of processes rooted at pid.
func (s *Snapshot) Tree(pid int) (Usage, error) {
	all, children := s.all, s.children
	if _, ok := all[pid]; !ok {
		return Usage{}, ErrNoProcess
	}
	var u Usage
	page := int64(os.Getpagesize())
	var ticks int64
	todo := []int{pid}
	seen := map[int]bool{}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[p] {
			continue
		}
		seen[p] = true
		s := all[p]
		u.Processes++
		ticks += s.cpuTicks + s.childrenTicks
		u.RSSBytes += s.rssPages * page
		todo = append(todo, children[p]...)
	}
	u.CPUSeconds = float64(ticks) / clockTicks
	return u, nil
}

// readStat reads the fields of /proc/PID/stat that Tree needs. The command
// name (field 2) may hold spaces and parentheses, so fields are counted
// from its last ')'.
func readStat(path string) (stat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return stat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, errors.New("procstat: bad stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 22 {
		return stat{}, errors.New("procstat: short stat")
	}
	num := func(n int) int64 { v, _ := strconv.ParseInt(f[n-3], 10, 64); return v }
	return stat{ppid: int(num(4)), cpuTicks: num(14) + num(15), childrenTicks: num(16) + num(17), rssPages: num(24)}, nil
}
