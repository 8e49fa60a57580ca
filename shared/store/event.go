package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/clock"
	"github.com/envlease/envlease/shared/domain"
)

// Events are an outbox: each is written by the same TransactWriteItems as the
// change it reports (eventPut is one more item of that transaction), so there
// is never an event without its change nor a change without its event.
//
//	EVT#<org>  <event id>                              newest first: the plain listing
//	  GSI1 EVT#<org>#<kind>            <event id>      one kind ("environment."), newest first
//	  GSI3 EVT#<org>#<kind>/<id>       <event id>      one subject's events, newest first
//	  GSI2 WHDUE#<n>  <time>#E#<org>#<event id>        until the delivery job has fanned it out
//	  ttl  time + domain.EventRetention
//
// Event ids sort by time, so every listing is one Query of one partition,
// read backwards, whatever the history (an index listing then reads the
// events it found with one BatchGetItem: the indexes project keys only): `since` is a key condition on the
// id (domain.EventIDFloor), and an exact type is a filter inside its kind's
// partition (the page stays bounded by Limit and the cursor is the last key
// read, so it is honest even when a page comes back short).
type eventItem struct {
	PK     string `dynamodbav:"PK"`
	SK     string `dynamodbav:"SK"`
	GSI1PK string `dynamodbav:"GSI1PK"`
	GSI1SK string `dynamodbav:"GSI1SK"`
	GSI2PK string `dynamodbav:"GSI2PK,omitempty"`
	GSI2SK string `dynamodbav:"GSI2SK,omitempty"`
	GSI3PK string `dynamodbav:"GSI3PK"`
	GSI3SK string `dynamodbav:"GSI3SK"`

	Org         string    `dynamodbav:"org"`
	ID          string    `dynamodbav:"id"`
	Type        string    `dynamodbav:"type"`
	Time        time.Time `dynamodbav:"time"`
	ActorKind   string    `dynamodbav:"actorKind"`
	ActorID     string    `dynamodbav:"actorId"`
	SubjectKind string    `dynamodbav:"subjectKind"`
	SubjectID   string    `dynamodbav:"subjectId"`
	Data        string    `dynamodbav:"data"`
	TTL         int64     `dynamodbav:"ttl"`
}

// WebhookDueBase is the webhook outbox's GSI2 index: its partitions,
// WebhookDuePK(n) for n below OutboxShards, hold events waiting to be fanned
// out to webhooks and deliveries waiting for a try.
const WebhookDueBase = "WHDUE"

// WebhookDuePK is the n-th GSI2 partition of the webhook outbox.
func WebhookDuePK(n int) string { return shardPK(WebhookDueBase, n) }

// OutboxShards is how many partitions the webhook outbox is spread over (the
// store's due-index shard count), so no one partition takes every
// organization's writes.
func (s *Store) OutboxShards() int { return s.shards }

// EventPKPrefix begins the partition key of every event item (EVT#<org>):
// the stream trigger's filter tells a new event from other new items by it.
const EventPKPrefix = "EVT#"

func eventPK(org string) string           { return EventPKPrefix + org }
func eventKindPK(org, kind string) string { return EventPKPrefix + org + "#" + kind }
func eventSubjectPK(org string, s domain.Subject) string {
	return EventPKPrefix + org + "#" + s.Kind + "/" + s.ID
}

func (s *Store) newEventItem(ev domain.Event, outbox bool) (eventItem, error) {
	data, err := json.Marshal(ev.Data)
	if err != nil {
		return eventItem{}, domain.Internal(fmt.Errorf("event data: %w", err))
	}
	it := eventItem{
		PK: eventPK(ev.OrgID), SK: ev.ID,
		GSI1PK: eventKindPK(ev.OrgID, domain.EventKind(ev.Type)), GSI1SK: ev.ID,
		GSI3PK: eventSubjectPK(ev.OrgID, ev.Subject), GSI3SK: ev.ID,
		Org: ev.OrgID, ID: ev.ID, Type: ev.Type, Time: ev.Time,
		ActorKind: ev.Actor.Kind, ActorID: ev.Actor.ID, SubjectKind: ev.Subject.Kind, SubjectID: ev.Subject.ID,
		Data: string(data), TTL: ev.Time.Add(domain.EventRetention).Unix(),
	}
	if outbox {
		it.GSI2PK = WebhookDuePK(s.shardOf(ev.OrgID, ev.ID))
		it.GSI2SK = FormatTime(ev.Time) + "#E#" + ev.OrgID + "#" + ev.ID
	}
	return it, nil
}

func (it eventItem) domain() (domain.Event, error) {
	ev := domain.Event{
		ID: it.ID, Type: it.Type, Time: it.Time.UTC(), OrgID: it.Org,
		Actor: domain.Actor{Kind: it.ActorKind, ID: it.ActorID}, Subject: domain.Subject{Kind: it.SubjectKind, ID: it.SubjectID},
	}
	if err := json.Unmarshal([]byte(it.Data), &ev.Data); err != nil {
		return domain.Event{}, domain.Internal(fmt.Errorf("event %s data: %w", it.ID, err))
	}
	return ev, nil
}

// eventPut is the transaction item that writes ev into the outbox. It is
// appended to the transaction of the change ev reports.
func (s *Store) eventPut(ev domain.Event) (types.TransactWriteItem, error) {
	it, err := s.newEventItem(ev, true)
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	av, err := marshal(it)
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.table), Item: av, ConditionExpression: aws.String("attribute_not_exists(PK)"),
	}}, nil
}

// PutEvent writes an event that reports no change of its own (a refused
// lease): one PutItem.
func (s *Store) PutEvent(ctx context.Context, ev domain.Event) error {
	it, err := s.newEventItem(ev, true)
	if err != nil {
		return err
	}
	return s.putNew(ctx, "put event", it, "an event with this id already exists")
}

// transactWithEvent writes one item change and its event in one transaction.
// reasons come back as from transact: item 0 is the change.
func (s *Store) transactWithEvent(ctx context.Context, op string, change types.TransactWriteItem, ev domain.Event) ([]types.CancellationReason, error) {
	evPut, err := s.eventPut(ev)
	if err != nil {
		return nil, err
	}
	return s.transact(ctx, op, []types.TransactWriteItem{change, evPut})
}

// putNewWithEvent is putNew whose item comes with its event.
func (s *Store) putNewWithEvent(ctx context.Context, op string, v any, conflict string, ev domain.Event) error {
	item, err := marshal(v)
	if err != nil {
		return err
	}
	reasons, err := s.transactWithEvent(ctx, op, types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.table), Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)"),
	}}, ev)
	if err != nil {
		return err
	}
	if reasons != nil {
		return domain.Errorf(domain.CodeConflict, "%s", conflict)
	}
	return nil
}

// ListEvents returns one page of an organization's events, newest first:
// one Query of one partition (the organization's, a kind's, or a subject's).
func (s *Store) ListEvents(ctx context.Context, org string, q domain.EventQuery, now time.Time) (domain.EventPage, error) {
	floor := now.Add(-domain.EventRetention)
	if q.Since.After(floor) {
		floor = q.Since
	}
	vals := map[string]types.AttributeValue{":floor": str(domain.EventIDFloor(floor))}
	in := &dynamodb.QueryInput{TableName: aws.String(s.table), ScanIndexForward: aws.Bool(false), Limit: aws.Int32(int32(q.Limit))}
	var pk, pkAttr, skAttr string
	switch {
	case q.Subject != nil:
		pk, pkAttr, skAttr = eventSubjectPK(org, *q.Subject), AttrGSI3PK, AttrGSI3SK
		in.IndexName = aws.String(IndexGSI3)
	case q.Type != "":
		pk, pkAttr, skAttr = eventKindPK(org, domain.EventKind(q.Type)), AttrGSI1PK, AttrGSI1SK
		in.IndexName = aws.String(IndexGSI1)
	default:
		pk, pkAttr, skAttr = eventPK(org), AttrPK, AttrSK
	}
	// An exact type, and a kind inside a subject's partition, are filters
	// over a page bounded by Limit, applied here rather than as a
	// FilterExpression (which reads and bills the same): the cursor is then
	// the last key read, as with a filter in DynamoDB.
	keep := func(t string) bool { return true }
	if q.Type != "" && (q.Subject != nil || !strings.HasSuffix(q.Type, ".")) {
		want := q.Type
		if strings.HasSuffix(want, ".") {
			keep = func(t string) bool { return strings.HasPrefix(t, want) }
		} else {
			keep = func(t string) bool { return t == want }
		}
	}
	vals[":pk"] = str(pk)
	in.KeyConditionExpression = aws.String(pkAttr + " = :pk AND " + skAttr + " >= :floor")
	in.ExpressionAttributeValues = vals
	if q.Cursor != "" {
		start, err := decodeEventCursor(q.Cursor, org, pk, pkAttr, skAttr)
		if err != nil {
			return domain.EventPage{}, err
		}
		in.ExclusiveStartKey = start
	}
	out, err := s.db.Query(ctx, in)
	if err != nil {
		return domain.EventPage{}, dependencyError("list events", err)
	}
	items := out.Items
	if in.IndexName != nil {
		// The kind and subject indexes project keys only (Schema): the events
		// are read from the table, strongly consistent, in one BatchGetItem.
		if items, err = s.fetchItems(ctx, "list events", out.Items); err != nil {
			return domain.EventPage{}, err
		}
	}
	page := domain.EventPage{Events: make([]domain.Event, 0, len(items))}
	for _, raw := range items {
		var it eventItem
		if err := unmarshal(raw, &it); err != nil {
			return domain.EventPage{}, err
		}
		if !keep(it.Type) {
			continue
		}
		ev, err := it.domain()
		if err != nil {
			return domain.EventPage{}, err
		}
		page.Events = append(page.Events, ev)
	}
	if len(out.LastEvaluatedKey) > 0 {
		last, _ := out.LastEvaluatedKey[skAttr].(*types.AttributeValueMemberS)
		if last == nil || !eventIDOK(last.Value) {
			return domain.EventPage{}, domain.Internal(fmt.Errorf("list events: last evaluated key without %s", skAttr))
		}
		page.Next = encodeSortCursor(pk, last.Value, "")
	}
	return page, nil
}

// decodeEventCursor accepts only a `next` of the same listing (partition) of
// the caller's organization, naming a well-formed event id.
func decodeEventCursor(c, org, pk, pkAttr, skAttr string) (map[string]types.AttributeValue, error) {
	bad := domain.BadRequest("cursor", "cursor is not a `next` value of this listing")
	sc, ok := decodeEventSortCursor(c, pk)
	if !ok {
		return nil, bad
	}
	start := map[string]types.AttributeValue{AttrPK: str(eventPK(org)), AttrSK: str(sc)}
	if pkAttr != AttrPK {
		start[pkAttr] = str(pk)
		start[skAttr] = str(sc)
	}
	return start, nil
}

func decodeEventSortCursor(c, pk string) (string, bool) {
	if len(c) > maxCursorLen {
		return "", false
	}
	sc, ok := decodeRawSortCursor(c)
	if !ok || sc.Partition != pk || sc.ID != "" || !eventIDOK(sc.SK) {
		return "", false
	}
	return sc.SK, true
}

// eventIDOK checks the shape NewEventID makes: "evt_" and 26 base32 characters.
func eventIDOK(id string) bool {
	rest, ok := strings.CutPrefix(id, "evt_")
	if !ok || len(rest) != 26 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}

func decodeRawSortCursor(s string) (sortCursor, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return sortCursor{}, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var c sortCursor
	if err := dec.Decode(&c); err != nil || dec.More() {
		return sortCursor{}, false
	}
	return c, true
}

// SetClock sets the clock that stamps the events of writes not given a time
// (a node's report that finishes a teardown). Without one, the system clock.
func (s *Store) SetClock(c clock.Clock) { s.clock = c }

func (s *Store) now() time.Time {
	if s.clock == nil {
		return time.Now().UTC()
	}
	return s.clock.Now()
}

// quotaRefused is the 429 of a refused lease, after writing its
// quota.refused event. A refusal changes nothing, so that event is a write
// of its own; if it fails, the client still gets the 429 it is owed.
func (s *Store) quotaRefused(ctx context.Context, e domain.Environment, old map[string]types.AttributeValue) error {
	var q quotaItem
	if old != nil {
		_ = unmarshal(old, &q)
	}
	ev := domain.NewEvent(ctx, domain.EventQuotaRefused, e.OrgID, domain.Subject{Kind: "template", ID: e.Template}, e.Created,
		map[string]any{"template": e.Template, "limit": q.MaxLeases, "running": q.Running})
	_ = s.PutEvent(ctx, ev)
	return quotaError(e.Template, old)
}

// replaceWithEvent writes a versioned replace of an environment, with the
// event of its new state when the state changes (a ready report that only
// repeats writes none).
func (s *Store) replaceWithEvent(ctx context.Context, put types.TransactWriteItem, before, after domain.Environment) ([]types.CancellationReason, error) {
	if before.State == after.State {
		_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: put.Put.TableName, Item: put.Put.Item, ConditionExpression: put.Put.ConditionExpression,
			ExpressionAttributeNames: put.Put.ExpressionAttributeNames, ExpressionAttributeValues: put.Put.ExpressionAttributeValues,
		})
		if IsConditionFailed(err) {
			return []types.CancellationReason{{Code: aws.String("ConditionalCheckFailed")}}, nil
		}
		return nil, dependencyError("replace environment", err)
	}
	at := s.now()
	if after.State == domain.StateReady && after.Ready != nil {
		at = *after.Ready
	}
	return s.transactWithEvent(ctx, "replace environment", put, domain.EnvEvent(ctx, after, at))
}

func nodeEndEvent(ctx context.Context, n domain.Node, at time.Time) domain.Event {
	typ := domain.EventNodeLeft
	if n.State == domain.NodeLost {
		typ = domain.EventNodeLost
	}
	return domain.NewEvent(ctx, typ, n.OrgID, domain.Subject{Kind: "node", ID: n.ID}, at,
		map[string]any{"name": n.Name, "pool": n.Pool, "lastHeartbeat": n.LastHeartbeat})
}

func keyEvent(ctx context.Context, typ string, k domain.APIKey, at time.Time) domain.Event {
	data := map[string]any{"name": k.Name, "prefix": k.Prefix, "credential": k.Credential, "owner": k.Owner}
	// What a scoped, expiring or exchanged token may do is part of its
	// creation's record; unscoped tokens' events stay as they were.
	if k.Scopes != nil {
		data["scopes"] = k.Scopes
	}
	if k.Restrictions != nil {
		data["restrictions"] = k.Restrictions
	}
	if k.Expires != nil && typ == domain.EventKeyCreated {
		data["expires"] = k.Expires
	}
	if k.Exchange != nil {
		data["exchange"] = k.Exchange
	}
	return domain.NewEvent(ctx, typ, k.OrgID, domain.Subject{Kind: "key", ID: k.ID}, at, data)
}

func artifactEvent(ctx context.Context, typ string, a domain.Artifact, at *time.Time) domain.Event {
	t := a.Created
	if at != nil {
		t = *at
	}
	return domain.NewEvent(ctx, typ, a.OrgID, domain.Subject{Kind: "artifact", ID: a.ID}, t,
		map[string]any{"name": a.Name, "size": a.Size, "sha256": a.SHA256, "expires": a.Expires})
}

func artifactExpiredEvent(ctx context.Context, a domain.Artifact, prev string, now time.Time) domain.Event {
	ev := artifactEvent(ctx, domain.EventArtExpired, a, &now)
	ev.Data["previousState"] = prev
	return ev
}
