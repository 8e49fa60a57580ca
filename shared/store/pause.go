package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// Pausing and waking (docs/environments.md, "Pause on idle, wake on use").
// Each move is one transaction with the quota item, as a lease and a stop
// are, so `running` and `paused` stay exact under any race:
//
//	ready   -> paused   running - 1, paused + 1 (paused < maxPaused), usage so far, stop notice to its node
//	paused  -> pending  running + 1 (running < maxLeases), paused - 1
//	paused  -> stopped  paused - 1, the sandbox's listen ports freed
//
// A paused environment keeps its sandbox listen ports (its forwarders stay
// valid across a wake) and its node until the node says it is down.

// PauseEnvironment moves a ready environment to paused, its files kept in
// checkpoint artifact art: conditioned on its version, so a touch or a
// report since e was read refuses it (false, with the current record).
func (s *Store) PauseEnvironment(ctx context.Context, e domain.Environment, art string, retention time.Duration, now time.Time) (domain.Environment, bool, error) {
	if e.State != domain.StateReady {
		return domain.Environment{}, false, domain.Internal(fmt.Errorf("pause environment in state %s", e.State))
	}
	at := now.UTC()
	until := at.Add(retention)
	after := e
	after.State = domain.StatePaused
	after.StopReason = domain.PauseIdle
	after.Snapshot = art
	after.PausedAt = &at
	after.RetainUntil = &until
	after.Version = e.Version + 1
	put, err := s.envPutFrom(after, e.Version, domain.StateReady)
	if err != nil {
		return domain.Environment{}, false, err
	}
	items := []types.TransactWriteItem{
		put,
		{Update: &types.Update{
			TableName: aws.String(s.table), Key: key(orgPK(e.OrgID), QuotaSK(e.Template)),
			UpdateExpression: aws.String("SET running = running - :one, paused = if_not_exists(paused, :zero) + :one"),
			// if_not_exists is not for conditions: a quota item written
			// before pausing existed has no paused count yet.
			ConditionExpression:       aws.String("attribute_exists(PK) AND ((attribute_not_exists(paused) AND maxPaused > :zero) OR paused < maxPaused)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(1), ":zero": num(0)},
		}},
	}
	evPut, err := s.eventPut(domain.EnvEvent(ctx, after, at))
	if err != nil {
		return domain.Environment{}, false, err
	}
	items = append(items, evPut)
	if e.Node != "" {
		notice, err := s.stopNoticePut(e, at)
		if err != nil {
			return domain.Environment{}, false, err
		}
		items = append(items, notice)
	}
	// Its compute time so far, as a stop adds it; a wake starts the next run.
	items = append(items, s.usageItems(e, at, maxTransactItems-len(items))...)
	reasons, err := s.transact(ctx, "pause environment", items)
	if err != nil {
		return domain.Environment{}, false, err
	}
	switch {
	case reasons == nil:
		return after, true, nil
	case conditionFailed(reasons, 0):
		cur, err := s.GetEnvironment(ctx, e.OrgID, e.ID)
		return cur, false, err
	case conditionFailed(reasons, 1):
		return e, false, domain.ErrPausedQuotaFull
	}
	return domain.Environment{}, false, domain.Internal(fmt.Errorf("pause environment cancelled: %v", reasons))
}

// ResumeEnvironment wakes a paused environment whose node has let it go:
// pending again in its pool, with its checkpoint as its snapshot, its idle
// deadline from now, its run (and compute time) starting now. A full
// running quota is 429 quota, as a lease is; a changed record is false with
// the current one.
func (s *Store) ResumeEnvironment(ctx context.Context, e domain.Environment, now time.Time) (domain.Environment, bool, error) {
	if e.State != domain.StatePaused || e.Node != "" {
		return domain.Environment{}, false, domain.Internal(fmt.Errorf("resume environment in state %s on node %q", e.State, e.Node))
	}
	at := now.UTC()
	after := e
	after.State = domain.StatePending
	after.StopReason = ""
	after.Resumed = &at
	after.RetainUntil = nil
	after.Ready, after.ReadyMs, after.Restored, after.Error = nil, nil, nil, ""
	after.IdleUntil = at.Add(e.Idle.Std())
	if after.IdleUntil.After(e.Expires) {
		after.IdleUntil = e.Expires
	}
	// The checkpoint holds the shares' files as they were when it paused:
	// unpacking the shares again would put back what was changed since.
	after.Shares = make([]domain.EnvShare, len(e.Shares))
	for i, sh := range e.Shares {
		sh.Artifact = ""
		after.Shares[i] = sh
	}
	after.Exports = make([]domain.EnvExport, len(e.Exports))
	for i, x := range e.Exports {
		x.Target = ""
		after.Exports[i] = x
	}
	after.Checkpoint = nil
	after.Version = e.Version + 1
	put, err := s.envPutFrom(after, e.Version, domain.StatePaused)
	if err != nil {
		return domain.Environment{}, false, err
	}
	items := []types.TransactWriteItem{
		put,
		{Update: &types.Update{
			TableName: aws.String(s.table), Key: key(orgPK(e.OrgID), QuotaSK(e.Template)),
			UpdateExpression:                    aws.String("SET running = running + :one, paused = paused - :one"),
			ConditionExpression:                 aws.String("attribute_exists(PK) AND running < maxLeases"),
			ExpressionAttributeValues:           map[string]types.AttributeValue{":one": num(1)},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}},
	}
	evPut, err := s.eventPut(domain.EnvResumedEvent(ctx, after, at))
	if err != nil {
		return domain.Environment{}, false, err
	}
	items = append(items, evPut)
	reasons, err := s.transact(ctx, "resume environment", items)
	if err != nil {
		return domain.Environment{}, false, err
	}
	switch {
	case reasons == nil:
		return after, true, nil
	case conditionFailed(reasons, 0):
		cur, err := s.GetEnvironment(ctx, e.OrgID, e.ID)
		return cur, false, err
	case conditionFailed(reasons, 1):
		return e, false, s.quotaRefused(ctx, e, reasons[1].Item)
	}
	return domain.Environment{}, false, domain.Internal(fmt.Errorf("resume environment cancelled: %v", reasons))
}

// EndPausedEnvironment deletes a paused environment (its retention or hard
// expiry passed, or it was deleted): stopped with reason, its paused slot
// and its listen ports released. Its usage was recorded when it paused.
// The caller expires its checkpoint's artifact. One whose node has not yet
// said it tore it down is stopping, not stopped, its stop notice kept: the
// stop job drops the notice of a stopped environment, and the node would
// go on running what was deleted.
func (s *Store) EndPausedEnvironment(ctx context.Context, e domain.Environment, reason string, now time.Time) (domain.Environment, bool, error) {
	if e.State != domain.StatePaused {
		return domain.Environment{}, false, domain.Internal(fmt.Errorf("end paused environment in state %s", e.State))
	}
	at := now.UTC()
	after := e
	after.State = domain.StateStopped
	if e.Node != "" {
		after.State = domain.StateStopping
	}
	after.StopReason = reason
	after.Stopped = &at
	after.Version = e.Version + 1
	put, err := s.envPutFrom(after, e.Version, domain.StatePaused)
	if err != nil {
		return domain.Environment{}, false, err
	}
	items := []types.TransactWriteItem{
		put,
		{Update: &types.Update{
			TableName: aws.String(s.table), Key: key(orgPK(e.OrgID), QuotaSK(e.Template)),
			UpdateExpression:          aws.String("SET paused = paused - :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(1)},
		}},
	}
	for _, p := range e.Ports {
		items = append(items, types.TransactWriteItem{Delete: &types.Delete{
			TableName: aws.String(s.table), Key: key(orgPK(e.OrgID), portSK(e.Sandbox, p)),
		}})
	}
	evPut, err := s.eventPut(domain.EnvEvent(ctx, after, at))
	if err != nil {
		return domain.Environment{}, false, err
	}
	items = append(items, evPut)
	if after.State == domain.StateStopping {
		notice, err := s.stopNoticePut(e, at)
		if err != nil {
			return domain.Environment{}, false, err
		}
		items = append(items, notice)
	}
	reasons, err := s.transact(ctx, "end paused environment", items)
	if err != nil {
		return domain.Environment{}, false, err
	}
	if reasons != nil {
		if !conditionFailed(reasons, 0) {
			return domain.Environment{}, false, domain.Internal(fmt.Errorf("end paused environment cancelled: %v", reasons))
		}
		cur, err := s.GetEnvironment(ctx, e.OrgID, e.ID)
		return cur, false, err
	}
	return after, true, nil
}

// envPutFrom puts after in place of the record it was made from: only while
// that record is still at version and in state from, so a transaction of
// pause.go never acts on a record something else changed since it read it.
func (s *Store) envPutFrom(after domain.Environment, version int64, from domain.State) (types.TransactWriteItem, error) {
	item, err := marshal(s.newEnvItem(after))
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.table), Item: item,
		ConditionExpression:      aws.String("attribute_exists(PK) AND version = :version AND #state = :from"),
		ExpressionAttributeNames: map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":version": num(version), ":from": str(string(from)),
		},
	}}, nil
}
