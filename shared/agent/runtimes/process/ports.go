package process

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
)

// portPool hands out free TCP ports of the node, never one the agent
// already gave an environment: the preferred one when it is free.
type portPool struct {
	mu    sync.Mutex
	inUse map[int]bool
	// lowest is the lowest port an environment can bind: a template's port
	// below it is not used.
	lowest int
}

func (pp *portPool) take(preferred int) (int, error) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.inUse == nil {
		pp.inUse = map[int]bool{}
	}
	if preferred > 0 && preferred >= pp.lowest && preferred < 65536 && !pp.inUse[preferred] {
		if ln, err := net.Listen("tcp", ":"+strconv.Itoa(preferred)); err == nil {
			ln.Close()
			pp.inUse[preferred] = true
			return preferred, nil
		}
	}
	for i := 0; i < 20; i++ {
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !pp.inUse[port] {
			pp.inUse[port] = true
			return port, nil
		}
	}
	return 0, errors.New("find a free port: none found")
}

func (pp *portPool) release(ports map[string]int) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for _, p := range ports {
		delete(pp.inUse, p)
	}
}
