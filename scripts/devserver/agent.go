package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/envlease/envlease/shared/agent"
	"github.com/envlease/envlease/shared/agent/archive"
	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/nodes"
	"github.com/envlease/envlease/shared/timeouts"
)

// devNodeOptions tune the node side for one laptop: a heartbeat a second, so
// a deleted environment's process is gone about a second later, and a claim
// on the HTTP fallback that looks at the pending index at least every
// 100 ms. (In AWS the defaults apply: 10 s and 500 ms.) A heartbeat of an
// idle node on the node protocol costs nothing, so the fast beat does not
// cost the table more.
var devNodeOptions = nodes.Options{HeartbeatInterval: time.Second, PollMax: 100 * time.Millisecond}

// devReofferAfter and devReofferEvery: an offered environment nobody
// claimed is offered again after 2 s, looked at every second (AWS: 3 s).
const (
	devReofferAfter = 2 * time.Second
	devReofferEvery = time.Second
)

// nodeService is the node side of the local stack; its registrations name
// the local node protocol's WebSocket.
func nodeService(d deps, links nodes.Linker) *nodes.Service {
	opt := devNodeOptions
	opt.SocketURL = "ws" + strings.TrimPrefix(d.baseURL, "http") + nodes.SocketPath
	opt.Secrets = secretService(d)
	if d.stopper != nil {
		opt.Teller = d.stopper
	}
	return nodes.NewService(d.store, links, d.clock, opt)
}

// latePoster posts on connections made after it (the local sockets, which
// need the node service that needs the stopper that posts).
type latePoster struct{ to nodes.Poster }

func (p *latePoster) Post(ctx context.Context, conn nodes.ConnectionID, msg []byte) error {
	if p.to == nil {
		return errors.New("the node sockets are not open yet")
	}
	return p.to.Post(ctx, conn, msg)
}

// startReoffers runs the re-offer job and the stop job every
// devReofferEvery until the stack stops, as the nodesws function's
// scheduled invocations do in AWS. Here every writer of offers and stop
// notices shares d.store, so a tick reads only the shards written since it
// last read them or where what it read falls due (and all of them every
// nodes.DefaultMaxIdle): an idle stack does not query the table every
// second, which on minidyn (a query reads the whole table) slowed
// everything as the table grew.
func startReoffers(d deps) func() {
	ctx, cancel := context.WithCancel(d.ctx)
	d.offerer.SkipIdle(d.store.OfferWrites, 0)
	if d.stopper != nil {
		d.stopper.SkipIdle(d.store.StopWrites, 0)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		d.offerer.ReofferLoop(ctx, devReofferEvery, time.Time{})
	}()
	go func() {
		defer wg.Done()
		if d.stopper != nil {
			d.stopper.ResendLoop(ctx, devReofferEvery, time.Time{})
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// devArchiveLimits bound what an environment's archives may unpack to on
// the local stack: the agent's defaults, but 2 GiB rather than 8 of files,
// as every organization's agents share one machine's disk (16
// environments each) with the developer's own work. The floors of free
// disk and inodes are the agent's defaults (1 GiB, 5% of the inodes).
var devArchiveLimits = archive.Limits{
	MaxEntries: archive.DefaultMaxEntries, MaxBytes: 2 << 30, MaxRatio: archive.DefaultMaxRatio,
	MaxNameBytes: archive.DefaultMaxNameBytes, MaxNamesBytes: archive.DefaultMaxNamesBytes,
}

// devDiskDefault and devDiskMax are the dev server's environments' disks,
// smaller than a node's for the same reason.
const (
	devDiskDefault = 2 << 30
	devDiskMax     = 8 << 30
)

// startAgent runs the reference node agent for the local pools: one per pool
// of each organization of the fixture, each with a node credential issued
// in-process as an admin would (POST /v1/nodes/credentials), talking to the
// API over HTTP like any node. Environments run as local processes with
// targets on 127.0.0.1, in a temporary folder removed on stop. The returned
// function stops every agent (and so every process) and waits for them.
func startAgent(d deps) func() {
	dir, err := os.MkdirTemp("", "envlease-devserver-agent-")
	if err != nil {
		d.log.Error("node agent not started", "err", err.Error())
		return func() {}
	}
	ctx, cancel := context.WithCancel(d.ctx)
	svc := nodeService(d, nil)
	var wg sync.WaitGroup
	for _, o := range d.fixture.Orgs {
		admin := domain.Principal{OrgID: o.ID, UserID: "devserver", Role: domain.RoleAdmin, Credential: domain.CredentialCLI}
		for _, pool := range o.Pools {
			issued, err := svc.IssueCredential(ctx, admin, pool, fmt.Sprintf("devserver agent (%s)", pool))
			if err != nil {
				d.log.Error("node credential not issued", "org", o.ID, "pool", pool, "err", err.Error())
				continue
			}
			a, err := agent.New(agent.Config{
				API: d.baseURL, Token: issued.Token, Address: "127.0.0.1",
				WorkDir: filepath.Join(dir, o.ID, pool), Name: "devserver-" + o.ID + "-" + pool,
				Capacity: d.capacity, Grace: 2 * time.Second, Archives: devArchiveLimits, Log: d.log.With("agent", o.ID+"/"+pool),
				// A machine for local work may be a container that cannot make
				// namespaces; the agent then says in its warning what is shared.
				AllowSharedNetwork: true,
				// As root, each environment writes to a disk of its own;
				// where the machine has no loop devices the agent says so.
				DiskDefault: devDiskDefault, DiskMax: devDiskMax, AllowUnboundedDisk: true,
			})
			if err != nil {
				d.log.Error("node agent not started", "org", o.ID, "pool", pool, "err", err.Error())
				continue
			}
			if d.agents != nil {
				d.agents(o.ID, pool, a)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = a.Run(ctx) // returns when ctx ends, after stopping its processes
			}()
		}
	}
	return func() {
		cancel()
		wg.Wait()
		_ = os.RemoveAll(dir)
	}
}

// lostNodeSweep is the node side's periodic check, run by its own local loop
// as functions/lostnodes runs it in AWS.
func lostNodeSweep(d deps) timeouts.Sweep {
	return nodes.NewService(d.store, nil, d.clock, devNodeOptions).LostNodeSweep(d.log)
}
