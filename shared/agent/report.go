package agent

import (
	"context"
	"errors"
	"time"

	"github.com/envlease/envlease/shared/nodes"
)

// report sends a report, retrying network and server errors a few times:
// repeating a report is harmless. A refusal (4xx) is logged, not retried.
func (a *Agent) report(ctx context.Context, node, id string, r nodes.Report) {
	if err := a.reportErr(ctx, node, id, r); err != nil {
		a.log.Info("report not recorded", "environment", id, "state", r.State, "err", err)
	}
}

func (a *Agent) reportErr(ctx context.Context, node, id string, r nodes.Report) error {
	// Cut to what the service stores: a report it refused for its size
	// would leave the environment starting, holding its quota slot.
	r = r.Fit()
	backoff := 100 * time.Millisecond
	var err error
	for try := 0; try < 6; try++ {
		if err = a.send(ctx, node, id, r); err == nil {
			return nil
		}
		if s := statusOf(err); s >= 400 && s < 500 || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff *= 2
	}
	return err
}

// send sends a report on the node protocol's connection when one is open,
// and over HTTP otherwise or when the connection fails to answer.
func (a *Agent) send(ctx context.Context, node, id string, r nodes.Report) error {
	if sock := a.sock.Load(); sock != nil {
		_, err := sock.call(ctx, nodes.Message{Type: nodes.MsgReport, Node: node, Environment: id, Report: &r})
		if !errors.Is(err, errNoAnswer) {
			return err
		}
	}
	return a.api.Report(ctx, node, id, r)
}
