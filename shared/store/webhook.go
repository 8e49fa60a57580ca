package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// Webhooks and their deliveries:
//
//	ORG#<org>          WEBHOOK#<id>     the webhook (URL, types, signing secret, state)
//	ORG#<org>          COUNT#WEBHOOKS   how many webhooks the organization has (webhooks)
//	WHD#<org>#<hook>   <delivery id>    one event on its way to one webhook, every attempt in it
//	  GSI2 WHDUE#<n>   <next try>#D#<org>#<hook>#<delivery id>   pending only: the delivery job's index
//	  ttl              created + domain.EventRetention
//
// A delivery's id is its event's id with "dlv_" for "evt_": one delivery per
// event and webhook, sorted by time, so its webhook's deliveries list newest
// first from one partition.
type webhookItem struct {
	PK             string     `dynamodbav:"PK"`
	SK             string     `dynamodbav:"SK"`
	Org            string     `dynamodbav:"org"`
	ID             string     `dynamodbav:"id"`
	URL            string     `dynamodbav:"url"`
	Types          []string   `dynamodbav:"types"`
	State          string     `dynamodbav:"state"`
	Created        time.Time  `dynamodbav:"created"`
	CreatedBy      string     `dynamodbav:"createdBy"`
	Expires        *time.Time `dynamodbav:"expires,omitempty"`
	Disabled       *time.Time `dynamodbav:"disabled,omitempty"`
	DisabledReason string     `dynamodbav:"disabledReason,omitempty"`
	Secret         string     `dynamodbav:"secret"`
	SecretPrefix   string     `dynamodbav:"secretPrefix"`
}

func webhookSK(id string) string { return "WEBHOOK#" + id }

func newWebhookItem(w domain.Webhook) webhookItem {
	return webhookItem{
		PK: orgPK(w.OrgID), SK: webhookSK(w.ID), Org: w.OrgID, ID: w.ID, URL: w.URL, Types: w.Types,
		State: w.State, Created: w.Created, CreatedBy: w.CreatedBy, Expires: w.Expires, Disabled: w.Disabled,
		DisabledReason: w.DisabledReason, Secret: w.Secret, SecretPrefix: w.SecretPrefix,
	}
}

func (it webhookItem) domain() domain.Webhook {
	return domain.Webhook{
		OrgID: it.Org, ID: it.ID, URL: it.URL, Types: it.Types, State: it.State, Created: it.Created.UTC(),
		CreatedBy: it.CreatedBy, Expires: utcPtr(it.Expires), Disabled: utcPtr(it.Disabled), DisabledReason: it.DisabledReason,
		Secret: it.Secret, SecretPrefix: it.SecretPrefix,
	}
}

// PutWebhook writes a new webhook, whatever its organization already has
// (fixtures and tests; the service creates them with CreateWebhook).
func (s *Store) PutWebhook(ctx context.Context, w domain.Webhook) error {
	return s.putNew(ctx, "put webhook", newWebhookItem(w), "a webhook with this id already exists")
}

const webhookCountSK = "COUNT#WEBHOOKS"

// CreateWebhook writes a new webhook if its organization has fewer than
// limit: the webhook's put and the organization's count, conditioned on
// being under the limit, are one transaction, so creates that race cannot
// pass it together (a read of the listing, then a put, could).
func (s *Store) CreateWebhook(ctx context.Context, w domain.Webhook, limit int) error {
	if err := s.initWebhookCount(ctx, w.OrgID); err != nil {
		return err
	}
	item, err := marshal(newWebhookItem(w))
	if err != nil {
		return err
	}
	reasons, err := s.transact(ctx, "create webhook", []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(s.table), Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)")}},
		{Update: &types.Update{
			TableName: aws.String(s.table), Key: key(orgPK(w.OrgID), webhookCountSK),
			UpdateExpression:          aws.String("ADD #n :one"),
			ConditionExpression:       aws.String("#n < :max"),
			ExpressionAttributeNames:  map[string]string{"#n": "webhooks"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(1), ":max": num(int64(limit))},
		}},
	})
	switch {
	case err != nil:
		return err
	case conditionFailed(reasons, 1):
		return domain.Errorf(domain.CodeConflict, "your organization has %d webhooks, the most it may have; delete one first", limit)
	case reasons != nil:
		return domain.Errorf(domain.CodeConflict, "a webhook with this id already exists")
	}
	return nil
}

// initWebhookCount creates an organization's webhook count, from its
// listing, the first time one is created: every create after that counts
// itself in. Two first creates write the same count; one of them wins.
func (s *Store) initWebhookCount(ctx context.Context, org string) error {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: key(orgPK(org), webhookCountSK), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return dependencyError("read webhook count", err)
	}
	if out.Item != nil {
		return nil
	}
	hooks, err := s.ListWebhooks(ctx, org)
	if err != nil {
		return err
	}
	item := key(orgPK(org), webhookCountSK)
	item["webhooks"] = num(int64(len(hooks)))
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.table), Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)"),
	})
	if err != nil && !IsConditionFailed(err) {
		return dependencyError("create webhook count", err)
	}
	return nil
}

// ListWebhooks returns an organization's webhooks, newest first (ids sort by time).
func (s *Store) ListWebhooks(ctx context.Context, org string) ([]domain.Webhook, error) {
	in := s.inPartition(orgPK(org), "WEBHOOK#")
	in.ConsistentRead = aws.Bool(true)
	items, err := queryAll[webhookItem](ctx, s, "list webhooks", in)
	if err != nil {
		return nil, err
	}
	out := make([]domain.Webhook, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}

// GetWebhook reads one webhook of org.
func (s *Store) GetWebhook(ctx context.Context, org, id string) (domain.Webhook, error) {
	if !idOK(id) {
		return domain.Webhook{}, domain.NotFound("webhook")
	}
	it, err := getOne[webhookItem](ctx, s, "webhook", key(orgPK(org), webhookSK(id)))
	if err != nil {
		return domain.Webhook{}, err
	}
	return it.domain(), nil
}

// DeleteWebhook removes a webhook and counts it out of its organization's
// webhooks, in one transaction. Its pending deliveries are failed by the
// delivery job when their turn comes (it finds no webhook); its held ones
// stay held; every delivery record stays until its ttl.
func (s *Store) DeleteWebhook(ctx context.Context, org, id string) error {
	if !idOK(id) {
		return domain.NotFound("webhook")
	}
	del := types.TransactWriteItem{Delete: &types.Delete{
		TableName: aws.String(s.table), Key: key(orgPK(org), webhookSK(id)),
		ConditionExpression: aws.String("attribute_exists(PK)"),
	}}
	reasons, err := s.transact(ctx, "delete webhook", []types.TransactWriteItem{del, {Update: &types.Update{
		TableName: aws.String(s.table), Key: key(orgPK(org), webhookCountSK),
		UpdateExpression:          aws.String("ADD #n :minus"),
		ConditionExpression:       aws.String("#n > :zero"),
		ExpressionAttributeNames:  map[string]string{"#n": "webhooks"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":minus": num(-1), ":zero": num(0)},
	}}})
	switch {
	case err != nil:
		return err
	case conditionFailed(reasons, 0):
		return domain.NotFound("webhook")
	case reasons == nil:
		return nil
	}
	// No count to take it from (written before the organization's first
	// create kept one, or by PutWebhook): the delete alone.
	_, err = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: del.Delete.TableName, Key: del.Delete.Key, ConditionExpression: del.Delete.ConditionExpression,
	})
	if IsConditionFailed(err) {
		return domain.NotFound("webhook")
	}
	return dependencyError("delete webhook", err)
}

type deliveryItem struct {
	PK     string `dynamodbav:"PK"`
	SK     string `dynamodbav:"SK"`
	GSI2PK string `dynamodbav:"GSI2PK,omitempty"`
	GSI2SK string `dynamodbav:"GSI2SK,omitempty"`

	Org     string     `dynamodbav:"org"`
	ID      string     `dynamodbav:"id"`
	Webhook string     `dynamodbav:"webhook"`
	Event   string     `dynamodbav:"event"`
	Type    string     `dynamodbav:"type"`
	State   string     `dynamodbav:"state"`
	Created time.Time  `dynamodbav:"created"`
	NextTry *time.Time `dynamodbav:"nextTry,omitempty"`
	Retried *time.Time `dynamodbav:"retried,omitempty"`
	// Attempts is the JSON of the attempts: one attribute, whatever the emulator.
	Attempts  string `dynamodbav:"attempts"`
	LastCode  int    `dynamodbav:"lastCode"`
	LastMs    int64  `dynamodbav:"lastMs"`
	LastError string `dynamodbav:"lastError"`
	Body      []byte `dynamodbav:"body"`
	Version   int64  `dynamodbav:"version"`
	TTL       int64  `dynamodbav:"ttl"`
}

func deliveryPK(org, hook string) string { return "WHD#" + org + "#" + hook }

// DeliveryID is the id of the delivery of event evID.
func DeliveryID(evID string) string { return "dlv_" + strings.TrimPrefix(evID, "evt_") }

func (s *Store) newDeliveryItem(d domain.Delivery) deliveryItem {
	attempts, _ := json.Marshal(d.Attempts) // plain values: always encodes
	it := deliveryItem{
		PK: deliveryPK(d.OrgID, d.Webhook), SK: d.ID,
		Org: d.OrgID, ID: d.ID, Webhook: d.Webhook, Event: d.Event, Type: d.Type, State: d.State,
		Created: d.Created, NextTry: d.NextTry, Retried: d.Retried, Attempts: string(attempts), LastCode: d.LastCode, LastMs: d.LastMs,
		LastError: d.LastError, Body: d.Body, Version: d.Version, TTL: d.Created.Add(domain.EventRetention).Unix(),
	}
	if d.State == domain.DeliveryPending && d.NextTry != nil {
		it.GSI2PK = WebhookDuePK(s.shardOf(d.OrgID, d.Webhook+"/"+d.ID))
		it.GSI2SK = FormatTime(*d.NextTry) + "#D#" + d.OrgID + "#" + d.Webhook + "#" + d.ID
	}
	return it
}

func (it deliveryItem) domain() domain.Delivery {
	d := domain.Delivery{
		OrgID: it.Org, ID: it.ID, Webhook: it.Webhook, Event: it.Event, Type: it.Type, State: it.State,
		Created: it.Created.UTC(), NextTry: utcPtr(it.NextTry), Retried: utcPtr(it.Retried), LastCode: it.LastCode,
		LastMs: it.LastMs, LastError: it.LastError, Body: it.Body, Version: it.Version,
	}
	_ = json.Unmarshal([]byte(it.Attempts), &d.Attempts) // written by newDeliveryItem
	if d.Attempts == nil {
		d.Attempts = []domain.Attempt{}
	}
	for i := range d.Attempts {
		d.Attempts[i].At = d.Attempts[i].At.UTC()
	}
	return d
}

// DueOutbox returns one page of shard n's entries due at or before now,
// oldest first, read from their base items (strongly consistent), and the
// cursor of the next page ("" after the last). limit bounds the index
// entries read, not the entries returned: GSI2 is eventually consistent, so
// an entry whose base item has left the outbox or moved on is skipped (a
// page may come back short, even empty, with more after it), and every
// action on an entry is a write conditioned on its base item. The job pages
// on with the cursor within a run, so entries it cannot settle (stale, or
// failing) never hide the ones behind them.
func (s *Store) DueOutbox(ctx context.Context, shard int, now time.Time, limit int, cursor string) ([]domain.OutboxEntry, string, error) {
	items, next, err := s.queryDue(ctx, "due outbox", WebhookDueBase, WebhookDuePK(shard), now, limit, cursor)
	if err != nil {
		return nil, "", err
	}
	out := make([]domain.OutboxEntry, 0, len(items))
	for _, raw := range items {
		pk, _ := raw[AttrPK].(*types.AttributeValueMemberS)
		switch {
		case pk != nil && strings.HasPrefix(pk.Value, EventPKPrefix):
			var it eventItem
			if err := unmarshal(raw, &it); err != nil {
				return nil, "", err
			}
			if it.GSI2PK == "" {
				continue // fanned out since the index was read
			}
			ev, err := it.domain()
			if err != nil {
				return nil, "", err
			}
			out = append(out, domain.OutboxEntry{Event: &ev})
		case pk != nil && strings.HasPrefix(pk.Value, "WHD#"):
			var it deliveryItem
			if err := unmarshal(raw, &it); err != nil {
				return nil, "", err
			}
			d := it.domain()
			if d.State != domain.DeliveryPending || d.NextTry == nil || d.NextTry.After(now) {
				continue // tried or moved since the index was read
			}
			out = append(out, domain.OutboxEntry{Delivery: &d})
		}
	}
	return out, next, nil
}

// FanOut takes an event out of the outbox and, in the same transaction,
// creates its delivery to each of hooks, due at now. It happens once: the
// event's write is conditioned on it still being in the outbox, so a second
// run (or a racing one) changes nothing and reports false. A held delivery
// (its webhook disabled) is created only if its webhook is still disabled
// (heldCheck); if not, nothing is written and it reports false.
//
// An organization has at most a few dozen webhooks (the service's limit),
// but should more exist anyway, the deliveries past what one transaction
// holds are written first, each by a PutItem that creates it only if it does
// not exist: a delivery's key is its event and webhook, so a run that dies
// before the transaction, or a racing run, adds no second one.
func (s *Store) FanOut(ctx context.Context, ev domain.Event, deliveries []domain.Delivery) (bool, error) {
	if extra := len(deliveries) - (maxTransactItems - 1); extra > 0 {
		if err := s.putDeliveriesOnce(ctx, deliveries[:extra]); err != nil {
			return false, err
		}
		deliveries = deliveries[extra:]
	}
	it, err := s.newEventItem(ev, false)
	if err != nil {
		return false, err
	}
	av, err := marshal(it)
	if err != nil {
		return false, err
	}
	items := []types.TransactWriteItem{{Put: &types.Put{
		TableName: aws.String(s.table), Item: av,
		ConditionExpression: aws.String("attribute_exists(GSI2PK)"),
	}}}
	checked := map[string]bool{}
	for _, d := range deliveries {
		dav, err := marshal(s.newDeliveryItem(d))
		if err != nil {
			return false, err
		}
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String(s.table), Item: dav, ConditionExpression: aws.String("attribute_not_exists(PK)"),
		}})
		if d.State == domain.DeliveryHeld && !checked[d.Webhook] && len(items) < maxTransactItems {
			checked[d.Webhook] = true
			items = append(items, heldCheck(s.table, d))
		}
	}
	if len(items) == 1 {
		// No webhook wants it: a conditional PutItem takes it out of the outbox.
		_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: av, ConditionExpression: items[0].Put.ConditionExpression})
		if IsConditionFailed(err) {
			return false, nil
		}
		if err != nil {
			return false, dependencyError("fan out event", err)
		}
		return true, nil
	}
	reasons, err := s.transact(ctx, "fan out event", items)
	if err != nil {
		return false, err
	}
	return reasons == nil, nil
}

// heldCheck is the condition of holding a delivery: its webhook is still
// disabled. A job that read the webhook before it was enabled again (and its
// held deliveries released) must not hold one more that nothing would
// release: its write fails, and the entry stays due for a run that reads
// the webhook anew.
func heldCheck(table string, d domain.Delivery) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(table), Key: key(orgPK(d.OrgID), webhookSK(d.Webhook)),
		ConditionExpression:       aws.String("#state = :off"),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":off": str(domain.WebhookDisabled)},
	}}
}

func (s *Store) putDeliveriesOnce(ctx context.Context, ds []domain.Delivery) error {
	for _, d := range ds {
		av, err := marshal(s.newDeliveryItem(d))
		if err != nil {
			return err
		}
		_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(s.table), Item: av, ConditionExpression: aws.String("attribute_not_exists(PK)"),
		})
		if err != nil && !IsConditionFailed(err) {
			return dependencyError("fan out event", err)
		}
	}
	return nil
}

// SaveDelivery replaces a delivery with after, if it is still the version
// read (before.Version): an attempt's record, a retry asked by hand. With
// disable set, the same transaction disables the webhook and writes the
// webhook.disabled event, once (the webhook must still be enabled).
// It reports whether the write happened.
func (s *Store) SaveDelivery(ctx context.Context, before, after domain.Delivery, disable *domain.Event) (bool, error) {
	after.Version = before.Version + 1
	av, err := marshal(s.newDeliveryItem(after))
	if err != nil {
		return false, err
	}
	items := []types.TransactWriteItem{{Put: &types.Put{
		TableName: aws.String(s.table), Item: av,
		ConditionExpression:       aws.String("attribute_exists(PK) AND version = :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": num(before.Version)},
	}}}
	if after.State == domain.DeliveryHeld && before.State != domain.DeliveryHeld {
		items = append(items, heldCheck(s.table, after))
		reasons, err := s.transact(ctx, "hold delivery", items)
		return err == nil && reasons == nil, err
	}
	if disable == nil {
		// One item: a conditional PutItem, half the write cost of a transaction.
		_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(s.table), Item: av, ConditionExpression: items[0].Put.ConditionExpression,
			ExpressionAttributeValues: items[0].Put.ExpressionAttributeValues,
		})
		if IsConditionFailed(err) {
			return false, nil
		}
		if err != nil {
			return false, dependencyError("save delivery", err)
		}
		return true, nil
	}
	{
		items = append(items, types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String(s.table), Key: key(orgPK(after.OrgID), webhookSK(after.Webhook)),
			UpdateExpression:         aws.String("SET #state = :off, disabled = :at, disabledReason = :why"),
			ConditionExpression:      aws.String("attribute_exists(PK) AND #state = :on"),
			ExpressionAttributeNames: map[string]string{"#state": "state"},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":off": str(domain.WebhookDisabled), ":on": str(domain.WebhookEnabled),
				":at": str(FormatTime(disable.Time)), ":why": str(fmt.Sprint(disable.Data["reason"])),
			},
		}})
		evPut, err := s.eventPut(*disable)
		if err != nil {
			return false, err
		}
		items = append(items, evPut)
	}
	reasons, err := s.transact(ctx, "save delivery", items)
	if err != nil {
		return false, err
	}
	if reasons != nil && disable != nil && !conditionFailed(reasons, 0) {
		// The webhook was disabled or deleted meanwhile: record the attempt alone.
		return s.SaveDelivery(ctx, before, after, nil)
	}
	return reasons == nil, nil
}

// EnableWebhook turns a disabled webhook back on.
func (s *Store) EnableWebhook(ctx context.Context, org, id string) (domain.Webhook, error) {
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: key(orgPK(org), webhookSK(id)),
		UpdateExpression:          aws.String("SET #state = :on"),
		ConditionExpression:       aws.String("attribute_exists(PK)"),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":on": str(domain.WebhookEnabled)},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if IsConditionFailed(err) {
		return domain.Webhook{}, domain.NotFound("webhook")
	}
	if err != nil {
		return domain.Webhook{}, dependencyError("enable webhook", err)
	}
	var it webhookItem
	if err := unmarshal(out.Attributes, &it); err != nil {
		return domain.Webhook{}, err
	}
	return it.domain(), nil
}

// ReleaseHeld queues again, due at now, up to limit of a webhook's held
// deliveries (those recorded while it was disabled), each with a fresh 24
// hours of retries, and reports how many it released and whether more may be
// held. It reads the webhook's delivery partition with a filter: what it
// reads is bounded by the deliveries' ttl (domain.EventRetention), and a
// caller with more to release calls again.
//
// The query sets no Limit: with a filter, Limit caps the items read per
// page, not the held ones returned, so a small one only splits the same
// read into more round trips (one per 100 deliveries of the webhook, held or
// not). Unlimited pages stop at DynamoDB's 1 MB; the release stops at limit.
func (s *Store) ReleaseHeld(ctx context.Context, org, hook string, now time.Time, limit int) (int, bool, error) {
	pk := deliveryPK(org, hook)
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		KeyConditionExpression:    aws.String("PK = :pk"),
		FilterExpression:          aws.String("#state = :held"),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(pk), ":held": str(domain.DeliveryHeld)},
		ConsistentRead:            aws.Bool(true),
	}
	released := 0
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return released, true, dependencyError("release held deliveries", err)
		}
		for _, raw := range out.Items {
			if released >= limit {
				return released, true, nil
			}
			var it deliveryItem
			if err := unmarshal(raw, &it); err != nil {
				return released, true, err
			}
			d := it.domain()
			after := d
			after.State, after.NextTry, after.Retried = domain.DeliveryPending, &now, &now
			ok, err := s.SaveDelivery(ctx, d, after, nil)
			if err != nil {
				return released, true, err
			}
			if ok {
				released++
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return released, false, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// GetDelivery reads one delivery of a webhook.
func (s *Store) GetDelivery(ctx context.Context, org, hook, id string) (domain.Delivery, error) {
	if !idOK(hook) || !idOK(id) {
		return domain.Delivery{}, domain.NotFound("delivery")
	}
	it, err := getOne[deliveryItem](ctx, s, "delivery", key(deliveryPK(org, hook), id))
	if err != nil {
		return domain.Delivery{}, err
	}
	return it.domain(), nil
}

// ListDeliveries returns one page of a webhook's deliveries, newest first.
func (s *Store) ListDeliveries(ctx context.Context, org, hook string, limit int, cursor string) (domain.DeliveryPage, error) {
	pk := deliveryPK(org, hook)
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		KeyConditionExpression:    aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(pk)},
		ScanIndexForward:          aws.Bool(false),
		Limit:                     aws.Int32(int32(limit)),
	}
	if cursor != "" {
		sc, ok := decodeRawSortCursor(cursor)
		if len(cursor) > maxCursorLen || !ok || sc.Partition != pk || sc.ID != "" || !eventIDOK("evt_"+strings.TrimPrefix(sc.SK, "dlv_")) || !strings.HasPrefix(sc.SK, "dlv_") {
			return domain.DeliveryPage{}, domain.BadRequest("cursor", "cursor is not a `next` value of this listing")
		}
		in.ExclusiveStartKey = key(pk, sc.SK)
	}
	out, err := s.db.Query(ctx, in)
	if err != nil {
		return domain.DeliveryPage{}, dependencyError("list deliveries", err)
	}
	page := domain.DeliveryPage{Deliveries: make([]domain.Delivery, 0, len(out.Items))}
	for _, raw := range out.Items {
		var it deliveryItem
		if err := unmarshal(raw, &it); err != nil {
			return domain.DeliveryPage{}, err
		}
		page.Deliveries = append(page.Deliveries, it.domain())
	}
	if len(out.LastEvaluatedKey) > 0 {
		var last deliveryItem
		if err := unmarshal(out.LastEvaluatedKey, &last); err != nil {
			return domain.DeliveryPage{}, err
		}
		page.Next = encodeSortCursor(pk, last.SK, "")
	}
	return page, nil
}
