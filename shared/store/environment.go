package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// Environment items live under their organization:
//
//	ORG#<org>  ENV#<id>
//	  GSI1 ORG#<org>#ENV#live | ORG#<org>#ENV#<state>   <created>#<id>    listing, newest first
//	  GSI2 ENVDUE#<shard>        <due>#<org>#<id>                          live and paused only: the timeout job's index (a lower bound of the deadline, see due.go)
//	  GSI3 POOL#<org>#<pool>#pending[#<class>]  <created>#<org>#<id>       pending only: nodes of the pool claim from it (class: domain.Needs.Class)
//	  GSI3 NODE#<org>#<node>     <created>#<id>                            starting, ready, stopping, paused while its node tears it down: what a node runs
//	  ttl                        stopped and failed only: stopped + domain.EnvRecordKept
//	ORG#<org>  SBXPORT#<sandbox>#<port>   a listen port held by a live environment of the sandbox
//
// The live partition of GSI1 holds only live environments, so listing them
// reads what is live, however many stopped ones the organization has.
//
// Empty collections are omitted rather than stored empty (minidyn v0.8.2
// gives an empty map back as another attribute's value); reading restores
// them as empty.
type envItem struct {
	PK     string `dynamodbav:"PK"`
	SK     string `dynamodbav:"SK"`
	GSI1PK string `dynamodbav:"GSI1PK"`
	GSI1SK string `dynamodbav:"GSI1SK"`
	GSI2PK string `dynamodbav:"GSI2PK,omitempty"`
	GSI2SK string `dynamodbav:"GSI2SK,omitempty"`
	GSI3PK string `dynamodbav:"GSI3PK,omitempty"`
	GSI3SK string `dynamodbav:"GSI3SK,omitempty"`

	Org        string            `dynamodbav:"org"`
	ID         string            `dynamodbav:"id"`
	Name       string            `dynamodbav:"name"`
	Template   string            `dynamodbav:"template"`
	State      string            `dynamodbav:"state"`
	Node       string            `dynamodbav:"node"`
	Sandbox    string            `dynamodbav:"sandbox"`
	Pool       string            `dynamodbav:"pool"`
	Labels     map[string]string `dynamodbav:"labels,omitempty"`
	Project    string            `dynamodbav:"project"`
	ReadyMs    *int64            `dynamodbav:"readyMs,omitempty"`
	Error      string            `dynamodbav:"error"`
	CreatedBy  string            `dynamodbav:"createdBy"`
	Created    time.Time         `dynamodbav:"created"`
	Ready      *time.Time        `dynamodbav:"ready,omitempty"`
	Stopped    *time.Time        `dynamodbav:"stopped,omitempty"`
	Expires    time.Time         `dynamodbav:"expires"`
	IdleUntil  time.Time         `dynamodbav:"idleUntil"`
	IdleNs     int64             `dynamodbav:"idleNs"`
	HardNs     int64             `dynamodbav:"hardNs"`
	Exports    []exportItem      `dynamodbav:"exports,omitempty"`
	Shares     []shareItem       `dynamodbav:"shares,omitempty"`
	Snapshot   string            `dynamodbav:"snapshot"`
	Restored   *restoredItem     `dynamodbav:"restored,omitempty"`
	StopReason string            `dynamodbav:"stopReason"`
	Log        string            `dynamodbav:"log,omitempty"`
	NetworkLog string            `dynamodbav:"networkLog,omitempty"`
	// Network is domain.Environment.Network as JSON, written only whole.
	Network string `dynamodbav:"network,omitempty"`
	Ports   []int  `dynamodbav:"ports,omitempty"`
	// Runtime and Platforms are domain.Needs: what a node must offer.
	Runtime   string   `dynamodbav:"runtime,omitempty"`
	Platforms []string `dynamodbav:"platforms,omitempty"`
	// UsageBy is domain.Environment.UsageBy (usageby.go).
	UsageBy []string `dynamodbav:"usageBy,omitempty"`
	// Checkpoint is the latest checkpoint asked of it, as JSON: read and
	// written only whole, with the record.
	Checkpoint string `dynamodbav:"checkpoint,omitempty"`
	// Previews are domain.Environment.Previews as JSON (preview.go).
	Previews string `dynamodbav:"previews,omitempty"`
	// Identity is domain.Environment.Identity as JSON, written only whole.
	Identity string `dynamodbav:"identity,omitempty"`
	// What pausing needs (pause.go): the idle action and retention kept
	// at lease, and the instants of the last pause and wake.
	OnIdle      string     `dynamodbav:"onIdle,omitempty"`
	RetentionNs int64      `dynamodbav:"retentionNs,omitempty"`
	PausedAt    *time.Time `dynamodbav:"pausedAt,omitempty"`
	RetainUntil *time.Time `dynamodbav:"retainUntil,omitempty"`
	Resumed     *time.Time `dynamodbav:"resumed,omitempty"`
	// TTL lets DynamoDB delete a stopped or failed record once it has been
	// kept domain.EnvRecordKept; readers compare it to now (Purged), as TTL
	// deletes late.
	TTL int64 `dynamodbav:"ttl,omitempty"`
	// Version is bumped by every write of the item. StopEnvironment replaces
	// the whole item (minidyn v0.8.2 ignores REMOVE, and leaving the sparse
	// indexes needs their keys gone), conditioned on the version it read, so
	// it can never overwrite a write it did not see. Writers of environment
	// items must bump it.
	Version int64 `dynamodbav:"version"`
}

type exportItem struct {
	Service string `dynamodbav:"service"`
	Listen  string `dynamodbav:"listen"`
	Target  string `dynamodbav:"target"`
}

type shareItem struct {
	Name      string   `dynamodbav:"name"`
	Direction string   `dynamodbav:"direction"`
	EnvPath   string   `dynamodbav:"envPath"`
	LocalPath string   `dynamodbav:"localPath"`
	Files     []string `dynamodbav:"files,omitempty"`
	Artifact  string   `dynamodbav:"artifact,omitempty"`
}

type restoredItem struct {
	Key     string    `dynamodbav:"key"`
	Root    string    `dynamodbav:"root"`
	Files   int       `dynamodbav:"files"`
	Created time.Time `dynamodbav:"created"`
}

func envSK(id string) string { return "ENV#" + id }

// envListPK is the GSI1 partition an environment is listed in: one for all
// live states, one per other state.
func envListPK(org string, st domain.State) string {
	if st.Live() {
		return orgPK(org) + "#ENV#live"
	}
	return orgPK(org) + "#ENV#" + string(st)
}

// EnvListPartition is the GSI1 partition of a listing: "live" or a state.
func EnvListPartition(org, state string) string { return orgPK(org) + "#ENV#" + state }

func envListSK(created time.Time, id string) string { return FormatTime(created) + "#" + id }

// DuePK is the base of the GSI2 partitions of live environments
// (DuePK#<shard>), ordered by deadline.
const DuePK = "ENVDUE"

// EnvDuePartition is the GSI2 partition of environment id of org.
func (s *Store) EnvDuePartition(org, id string) string { return shardPK(DuePK, s.shardOf(org, id)) }

// DueSK orders a live environment by its deadline, min(idleUntil, expires).
// The timeout job queries GSI2PK = <a shard> AND GSI2SK < DueBefore(now).
func DueSK(due time.Time, org, id string) string { return FormatTime(due) + "#" + org + "#" + id }

// DueBefore is the exclusive upper bound of GSI2SK for environments due at or before now.
func DueBefore(now time.Time) string { return FormatTime(now) + "#\uffff" }

// PoolPendingPK is the GSI3 partition of a pool's pending environments.
// Pool names are per organization (two organizations may both have "local"),
// and a node credential serves one organization's pool, so the org is part of it.
func PoolPendingPK(org, pool string) string { return "POOL#" + org + "#" + pool + "#pending" }

// PoolPendingClassPK is the GSI3 partition of a pool's pending environments
// of one class (domain.Needs.Class): those that ask nothing special (class
// "") stay in PoolPendingPK, where they were before classes existed.
func PoolPendingClassPK(org, pool, class string) string {
	if class == "" {
		return PoolPendingPK(org, pool)
	}
	return PoolPendingPK(org, pool) + "#" + class
}

// NodeEnvPK is the GSI3 partition of the environments a node runs (starting,
// ready, stopping): heartbeats and the lost-node sweep read it.
func NodeEnvPK(org, node string) string { return "NODE#" + org + "#" + node }

// nodeRuns reports whether an environment in state st is still the node's to
// run or tear down, and so listed in its GSI3 partition.
func nodeRuns(st domain.State) bool {
	return st == domain.StateStarting || st == domain.StateReady || st == domain.StateStopping || st == domain.StatePaused
}

func poolPendingSK(created time.Time, org, id string) string {
	return FormatTime(created) + "#" + org + "#" + id
}

func portSK(sandbox string, port int) string { return "SBXPORT#" + sandbox + "#" + strconv.Itoa(port) }

func (s *Store) newEnvItem(e domain.Environment) envItem {
	it := envItem{
		PK: orgPK(e.OrgID), SK: envSK(e.ID),
		GSI1PK: envListPK(e.OrgID, e.State), GSI1SK: envListSK(e.Created, e.ID),
		Org: e.OrgID, ID: e.ID, Name: e.Name, Template: e.Template, State: string(e.State), Node: e.Node,
		Sandbox: e.Sandbox, Pool: e.Pool, Labels: e.Labels, Project: e.Project, ReadyMs: e.ReadyMs,
		Error: e.Error, CreatedBy: e.CreatedBy, Created: e.Created, Ready: e.Ready, Stopped: e.Stopped,
		Expires: e.Expires, IdleUntil: e.IdleUntil, IdleNs: int64(e.Idle), HardNs: int64(e.Hard),
		Snapshot: e.Snapshot, StopReason: e.StopReason, Log: e.Log, NetworkLog: e.NetworkLog, Ports: e.Ports, Version: e.Version,
		Runtime: e.Needs.Runtime, Platforms: e.Needs.Platforms, UsageBy: e.UsageBy,
		OnIdle: e.OnIdle, RetentionNs: int64(e.Retention), PausedAt: e.PausedAt, RetainUntil: e.RetainUntil, Resumed: e.Resumed,
	}
	if len(it.UsageBy) == 0 {
		it.UsageBy = nil
	}
	if len(it.Platforms) == 0 {
		it.Platforms = nil
	}
	if len(it.Labels) == 0 {
		it.Labels = nil // omitted: see the note on envItem
	}
	if len(it.Ports) == 0 {
		it.Ports = nil
	}
	if e.State.Live() || e.State == domain.StatePaused {
		it.GSI2PK, it.GSI2SK = s.EnvDuePartition(e.OrgID, e.ID), DueSK(e.Due(), e.OrgID, e.ID)
	}
	if at, ok := e.PurgeAt(); ok {
		it.TTL = at.Unix()
	}
	if e.State == domain.StatePending {
		it.GSI3PK, it.GSI3SK = PoolPendingClassPK(e.OrgID, e.Pool, e.Needs.Class()), poolPendingSK(e.Created, e.OrgID, e.ID)
	}
	if e.Node != "" && nodeRuns(e.State) {
		it.GSI3PK, it.GSI3SK = NodeEnvPK(e.OrgID, e.Node), envListSK(e.Created, e.ID)
	}
	for _, x := range e.Exports {
		it.Exports = append(it.Exports, exportItem(x))
	}
	for _, s := range e.Shares {
		si := shareItem(s)
		if len(si.Files) == 0 {
			si.Files = nil
		}
		it.Shares = append(it.Shares, si)
	}
	if e.Restored != nil {
		r := restoredItem(*e.Restored)
		it.Restored = &r
	}
	it.Checkpoint = checkpointText(e.Checkpoint)
	it.Network = networkText(e.Network)
	it.Previews = previewsText(e.Previews)
	it.Identity = identityText(e.Identity)
	return it
}

func (it envItem) domain() domain.Environment {
	e := domain.Environment{
		OrgID: it.Org, ID: it.ID, Name: it.Name, Template: it.Template, State: domain.State(it.State),
		Node: it.Node, Sandbox: it.Sandbox, Pool: it.Pool, Labels: it.Labels, Project: it.Project,
		ReadyMs: it.ReadyMs, Error: it.Error, CreatedBy: it.CreatedBy, Created: it.Created.UTC(),
		Ready: utcPtr(it.Ready), Stopped: utcPtr(it.Stopped), Expires: it.Expires.UTC(),
		IdleUntil: it.IdleUntil.UTC(), Idle: domain.Duration(it.IdleNs), Hard: domain.Duration(it.HardNs),
		Snapshot: it.Snapshot, StopReason: domain.NormalizeStopReason(it.StopReason), Log: it.Log, NetworkLog: it.NetworkLog, Ports: it.Ports, Version: it.Version,
		Needs: domain.Needs{Runtime: it.Runtime, Platforms: it.Platforms}, UsageBy: it.UsageBy,
		OnIdle: it.OnIdle, Retention: domain.Duration(it.RetentionNs), PausedAt: utcPtr(it.PausedAt),
		RetainUntil: utcPtr(it.RetainUntil), Resumed: utcPtr(it.Resumed),
	}
	for _, x := range it.Exports {
		e.Exports = append(e.Exports, domain.EnvExport(x))
	}
	for _, s := range it.Shares {
		e.Shares = append(e.Shares, domain.EnvShare(s))
	}
	if it.Restored != nil {
		r := domain.Restored(*it.Restored)
		r.Created = r.Created.UTC()
		e.Restored = &r
	}
	e.Checkpoint = checkpointOf(it.Checkpoint)
	e.Network = networkOf(it.Network)
	e.Previews = previewsOf(it.Previews)
	e.Identity = identityOf(it.Identity)
	e.Normalize()
	return e
}

func decodeEnv(raw map[string]types.AttributeValue) (domain.Environment, error) {
	var it envItem
	if err := unmarshal(raw, &it); err != nil {
		return domain.Environment{}, err
	}
	return it.domain(), nil
}

// liveCondition holds while an environment is pending, starting or ready.
const liveCondition = "#state IN (:pending, :starting, :ready)"

func liveValues(vals map[string]types.AttributeValue) map[string]types.AttributeValue {
	vals[":pending"] = str(string(domain.StatePending))
	vals[":starting"] = str(string(domain.StateStarting))
	vals[":ready"] = str(string(domain.StateReady))
	return vals
}

// LeaseEnvironment writes a new environment in ONE transaction with the
// quota check, so no concurrency can lease past maxLeases and `running`
// never drifts. The transaction also checks that the sandbox is registered,
// claims the sandbox listen ports, and records the Idempotency-Key.
//
// Refusals: domain.ErrIdempotencyKeyUsed, 422 for an unknown sandbox, 429
// code quota, domain.ErrListenPortTaken (the caller picks other ports).
func (s *Store) LeaseEnvironment(ctx context.Context, l domain.Lease) error {
	e := l.Env
	envAV, err := marshal(s.newEnvItem(e))
	if err != nil {
		return err
	}
	var items []types.TransactWriteItem
	idemAt, sandboxAt := -1, -1
	// The idempotency record comes first: when a retry also meets a full
	// quota, DynamoDB (and minidyn, which reports only the first failure)
	// must say "key used" so the first response is replayed.
	if rec := l.Idempotency; rec != nil {
		recAV, err := marshal(newIdemItem(*rec))
		if err != nil {
			return err
		}
		idemAt = len(items)
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String(s.table), Item: recAV,
			// An expired record may be replaced: TTL deletion runs late. Its
			// expiry is compared exactly as GetIdempotency does (expired at
			// `expires`), not by the whole seconds of ttl.
			ConditionExpression:       aws.String("attribute_not_exists(PK) OR #expires <= :now"),
			ExpressionAttributeNames:  map[string]string{"#expires": "expires"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": str(FormatTime(rec.Created))},
		}})
	}
	if e.Sandbox != "" {
		sandboxAt = len(items)
		items = append(items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
			TableName: aws.String(s.table), Key: key(orgPK(e.OrgID), sandboxSK(e.Sandbox)),
			ConditionExpression: aws.String("attribute_exists(PK)"),
		}})
	}
	budgetAt := -1
	if len(l.BudgetKeys) > 0 {
		budgetAt = len(items)
		items = append(items, s.budgetCheck(e.OrgID, l.BudgetKeys))
	}
	quotaAt := len(items)
	items = append(items, types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(s.table),
		Key:                       key(orgPK(e.OrgID), QuotaSK(e.Template)),
		UpdateExpression:          aws.String("SET running = running + :one"),
		ConditionExpression:       aws.String("attribute_exists(PK) AND running < maxLeases"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(1)},
		// The refused quota item comes back so the 429 can state the limit.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}})
	envAt := len(items)
	items = append(items, types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.table), Item: envAV, ConditionExpression: aws.String("attribute_not_exists(PK)"),
	}})
	evPut, err := s.eventPut(domain.EnvEvent(ctx, e, e.Created))
	if err != nil {
		return err
	}
	items = append(items, evPut)
	portsFrom := len(items)
	for _, p := range e.Ports {
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String(s.table),
			Item: map[string]types.AttributeValue{
				AttrPK: str(orgPK(e.OrgID)), AttrSK: str(portSK(e.Sandbox, p)), "env": str(e.ID),
			},
			ConditionExpression: aws.String("attribute_not_exists(PK)"),
		}})
	}

	reasons, err := s.transact(ctx, "lease environment", items)
	if err != nil || reasons == nil {
		return err
	}
	switch {
	case conditionFailed(reasons, idemAt):
		return domain.ErrIdempotencyKeyUsed
	case conditionFailed(reasons, sandboxAt):
		return domain.Invalid("sandbox", "sandbox %q is not registered in your organization", e.Sandbox)
	case conditionFailed(reasons, budgetAt):
		return budgetRefused(e, reasons[budgetAt].Item)
	case conditionFailed(reasons, quotaAt):
		return s.quotaRefused(ctx, e, reasons[quotaAt].Item)
	case conditionFailed(reasons, envAt):
		return domain.Internal(fmt.Errorf("lease environment: id %s already exists", e.ID))
	}
	for i := portsFrom; i < len(items); i++ {
		if conditionFailed(reasons, i) {
			return domain.ErrListenPortTaken
		}
	}
	return domain.Internal(fmt.Errorf("lease environment: cancelled without a failed condition: %v", reasons))
}

// quotaError is the 429 of a full quota. It states the limit, from the quota
// item the transaction refused, and what to do about it.
func quotaError(template string, old map[string]types.AttributeValue) error {
	if old == nil {
		// Only a missing quota item (a template configured by hand) has no old image.
		return &domain.Error{Code: domain.CodeQuota, Message: fmt.Sprintf(
			"template %q has no quota configured, so no environment of it can be leased", template)}
	}
	var q quotaItem
	_ = unmarshal(old, &q) // a malformed item still deserves the 429, with zeros
	if q.MaxLeases <= 0 {
		return &domain.Error{Code: domain.CodeQuota, Message: fmt.Sprintf(
			"the quota of template %q is 0 live environments: it cannot be leased", template)}
	}
	return &domain.Error{Code: domain.CodeQuota, Message: fmt.Sprintf(
		"quota reached: your organization may run at most %d live environment(s) of template %q at once and %d are live; delete a live environment of it first",
		q.MaxLeases, template, q.Running)}
}

// GetEnvironment reads one environment of org, strongly consistent so a
// client sees its own lease, delete and touch at once.
func (s *Store) GetEnvironment(ctx context.Context, org, id string) (domain.Environment, error) {
	if !idOK(id) {
		return domain.Environment{}, domain.NotFound("environment")
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: key(orgPK(org), envSK(id)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return domain.Environment{}, dependencyError("get environment", err)
	}
	if out.Item == nil {
		return domain.Environment{}, domain.NotFound("environment")
	}
	return decodeEnv(out.Item)
}

// ListEnvironments returns one page of org's environments in a GSI1
// partition, newest first. Live listings read only live items.
func (s *Store) ListEnvironments(ctx context.Context, org string, q domain.EnvQuery) (domain.EnvPage, error) {
	partition := "live"
	var filter *string
	vals := map[string]types.AttributeValue{}
	names := map[string]string(nil)
	switch st := domain.State(q.State); {
	case q.State == "" || q.State == "live":
	case st.Live():
		// pending, starting and ready share the live partition; a filter keeps one.
		filter = aws.String("#state = :state")
		names = map[string]string{"#state": "state"}
		vals[":state"] = str(q.State)
	default:
		partition = q.State
	}
	pk := EnvListPartition(org, partition)
	vals[":pk"] = str(pk)
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		IndexName:                 aws.String(IndexGSI1),
		KeyConditionExpression:    aws.String("GSI1PK = :pk"),
		FilterExpression:          filter,
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: vals,
		ScanIndexForward:          aws.Bool(false),
		Limit:                     aws.Int32(int32(q.Limit)),
	}
	if q.Cursor != "" {
		start, err := decodeCursor(q.Cursor, org, pk)
		if err != nil {
			return domain.EnvPage{}, err
		}
		in.ExclusiveStartKey = start
	}
	out, err := s.db.Query(ctx, in)
	if err != nil {
		return domain.EnvPage{}, dependencyError("list environments", err)
	}
	// GSI1 projects keys and state: the listed records are the base items.
	items, err := s.fetchItems(ctx, "list environments", out.Items)
	if err != nil {
		return domain.EnvPage{}, err
	}
	page := domain.EnvPage{Environments: make([]domain.Environment, 0, len(items))}
	for _, raw := range items {
		e, err := decodeEnv(raw)
		if err != nil {
			return domain.EnvPage{}, err
		}
		page.Environments = append(page.Environments, e)
	}
	if len(out.LastEvaluatedKey) > 0 {
		var last envItem
		if err := unmarshal(out.LastEvaluatedKey, &last); err != nil {
			return domain.EnvPage{}, err
		}
		page.Next = encodeSortCursor(pk, last.GSI1SK, strings.TrimPrefix(last.SK, "ENV#"))
	}
	return page, nil
}

// decodeCursor turns a `next` of ListEnvironments back into the start key of
// the query of partition pk of org (see sortCursor).
func decodeCursor(c, org, pk string) (map[string]types.AttributeValue, error) {
	sc, ok := decodeSortCursor(c, pk, TimeLayout)
	if !ok {
		return nil, domain.BadRequest("cursor", "cursor is not a `next` value of this listing")
	}
	return map[string]types.AttributeValue{
		AttrPK: str(orgPK(org)), AttrSK: str(envSK(sc.ID)), AttrGSI1PK: str(pk), AttrGSI1SK: str(sc.SK),
	}, nil
}

// StopEnvironment is the ONE way an environment leaves the live states, for
// every cause: DELETE, the timeout job, a node's report, a lost node. In a
// single transaction it replaces the environment with its stopped record,
// conditioned on it still being live and unchanged since e was read, releases
// the quota (running - 1), frees the sandbox listen ports and adds the
// environment's seconds to the usage ledger. So whatever races, the quota is
// released and the usage recorded exactly once: a second stop finds the
// condition false and changes nothing.
//
// It returns the environment after the call and whether this call stopped it.
// When the condition fails it returns the current record and false: callers
// stop again from that record while it is live (a touch or a node's report
// came between), and are done when it is not.
func (s *Store) StopEnvironment(ctx context.Context, e domain.Environment, to domain.State, reason string, now time.Time) (domain.Environment, bool, error) {
	if to.Live() || !to.Valid() {
		return domain.Environment{}, false, domain.Internal(fmt.Errorf("stop environment to %q", to))
	}
	items, after, err := s.stopItems(ctx, e, to, reason, now)
	if err != nil {
		return domain.Environment{}, false, err
	}
	reasons, err := s.transact(ctx, "stop environment", items)
	if err != nil {
		return domain.Environment{}, false, err
	}
	if reasons != nil {
		if !conditionFailed(reasons, 0) {
			return domain.Environment{}, false, domain.Internal(fmt.Errorf("stop environment cancelled: %v", reasons))
		}
		cur, err := s.GetEnvironment(ctx, e.OrgID, e.ID)
		return cur, false, err
	}
	return after, true, nil
}

// stopItems builds the stop transaction. Item 0 must stay the environment's
// conditional put; anything else a stop must record exactly once (the usage
// ledger, for one) is appended here, in this one place.
func (s *Store) stopItems(ctx context.Context, e domain.Environment, to domain.State, reason string, now time.Time) ([]types.TransactWriteItem, domain.Environment, error) {
	after := e
	after.State = to
	after.StopReason = reason
	stopped := now.UTC()
	after.Stopped = &stopped
	after.Version = e.Version + 1
	// newEnvItem of a state that is not live writes no GSI2 key and no pool
	// (claimable) GSI3 key: nothing is due or claimable after a stop. A
	// `stopping` environment keeps its node's GSI3 entry, so the node learns
	// that it must tear it down.
	item, err := marshal(s.newEnvItem(after))
	if err != nil {
		return nil, after, err
	}
	items := []types.TransactWriteItem{
		{Put: &types.Put{
			TableName: aws.String(s.table), Item: item,
			ConditionExpression:      aws.String("attribute_exists(PK) AND version = :version AND " + liveCondition),
			ExpressionAttributeNames: map[string]string{"#state": "state"},
			ExpressionAttributeValues: liveValues(map[string]types.AttributeValue{
				":version": num(e.Version),
			}),
		}},
		{Update: &types.Update{
			TableName: aws.String(s.table), Key: key(orgPK(e.OrgID), QuotaSK(e.Template)),
			// No condition: the environment's condition above already makes
			// this run once per lease, and a stop must never be refused.
			UpdateExpression:          aws.String("SET running = running - :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(1)},
		}},
	}
	for _, p := range e.Ports {
		items = append(items, types.TransactWriteItem{Delete: &types.Delete{
			TableName: aws.String(s.table), Key: key(orgPK(e.OrgID), portSK(e.Sandbox, p)),
		}})
	}
	evPut, err := s.eventPut(domain.EnvEvent(ctx, after, stopped))
	if err != nil {
		return nil, after, err
	}
	items = append(items, evPut)
	// A node tearing it down is told so (stopnotice.go); the notice commits
	// with the stop, so the stop job re-sends it if the message is lost.
	if to == domain.StateStopping && e.Node != "" {
		notice, err := s.stopNoticePut(e, stopped)
		if err != nil {
			return nil, after, err
		}
		items = append(items, notice)
	}
	// The usage ledger: seconds created -> stopped, per UTC day. Inside this
	// transaction, so it is added exactly once, whatever the cause of the
	// stop and however often a stop is retried or raced.
	items = append(items, s.usageItems(e, stopped, maxTransactItems-len(items))...)
	return items, after, nil
}

// TouchEnvironment moves idleUntil forward to idleUntil if the environment is
// still live and its deadline is earlier. It writes the base item alone: the
// due-index entry stays where it is, a lower bound of the later deadline,
// and the timeout job moves it when it comes due (see due.go). It returns
// the environment and whether it moved; when it did not, the current record
// comes back so the caller can tell a stop from a later touch.
func (s *Store) TouchEnvironment(ctx context.Context, e domain.Environment, idleUntil time.Time) (domain.Environment, bool, error) {
	after := e
	after.IdleUntil = idleUntil.UTC()
	after.Version = e.Version + 1
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      key(orgPK(e.OrgID), envSK(e.ID)),
		UpdateExpression:         aws.String("SET idleUntil = :iu, version = version + :one"),
		ConditionExpression:      aws.String("attribute_exists(PK) AND " + liveCondition + " AND idleUntil < :iu"),
		ExpressionAttributeNames: map[string]string{"#state": "state"},
		ExpressionAttributeValues: liveValues(map[string]types.AttributeValue{
			":iu": str(FormatTime(idleUntil)), ":one": num(1),
		}),
	})
	if IsConditionFailed(err) {
		cur, err := s.GetEnvironment(ctx, e.OrgID, e.ID)
		return cur, false, err
	}
	if err != nil {
		return domain.Environment{}, false, dependencyError("touch environment", err)
	}
	return after, true, nil
}

// PutEnvironments writes environment records as they are, 25 per
// BatchWriteItem, without quota accounting or port claims: for seeding
// benchmarks and importing history, never for leasing.
func (s *Store) PutEnvironments(ctx context.Context, envs []domain.Environment) error {
	for len(envs) > 0 {
		n := min(25, len(envs))
		var reqs []types.WriteRequest
		for _, e := range envs[:n] {
			item, err := marshal(s.newEnvItem(e))
			if err != nil {
				return err
			}
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
		}
		envs = envs[n:]
		pending := map[string][]types.WriteRequest{s.table: reqs}
		for attempt := 0; len(pending[s.table]) > 0; attempt++ {
			if attempt > 8 {
				return domain.Unavailable("the table", fmt.Errorf("put environments: items left unprocessed"))
			}
			out, err := s.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
			if err != nil {
				return dependencyError("put environments", err)
			}
			pending = out.UnprocessedItems
		}
	}
	return nil
}

// networkText is an environment's own network layer as stored: JSON, ""
// for none.
func networkText(n *domain.EnvNetwork) string {
	if n == nil {
		return ""
	}
	b, _ := json.Marshal(n) // two lists of strings always marshal
	return string(b)
}

func networkOf(s string) *domain.EnvNetwork {
	if s == "" {
		return nil
	}
	var n domain.EnvNetwork
	if json.Unmarshal([]byte(s), &n) != nil {
		return nil
	}
	return &n
}

// identityText is an environment's identity as stored: JSON, "" for none.
func identityText(i *domain.TemplateIdentity) string {
	if i == nil {
		return ""
	}
	b, _ := json.Marshal(i) // strings and a duration always marshal
	return string(b)
}

func identityOf(s string) *domain.TemplateIdentity {
	if s == "" {
		return nil
	}
	var i domain.TemplateIdentity
	if json.Unmarshal([]byte(s), &i) != nil {
		return nil
	}
	return &i
}
