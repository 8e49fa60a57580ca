package devstack

import (
	"context"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// The in-process client answers the plain reads typed: a GetItem, a
// BatchGetItem or a Query the front would answer itself (fastRead) is
// answered from its items straight into the SDK's output, before the SDK
// serializes the request. Even in process, about half of such a call's CPU
// went to JSON (the request serialized and decoded again, the answer
// encoded and deserialized into attribute values), and a lease makes ~10 of
// them; the front's lock was held while the answer was encoded, where it is
// now held for the lookups alone. Everything in the Initialize step still
// runs (the operation's input validation, call counters, tests' faults),
// and the caller gets the same output the JSON way gives: the same items, in
// the same order, its own copies.
//
// The checks are fastRead's (dynamofast.go), made on the typed input: no
// failure emulation on, no projection, filter or Select, no consumed
// capacity asked; each key exactly the table's key attributes, non-empty
// strings as the table defines them; at most 100 keys in a batch, none
// twice, every table there; a query's own checks (readQuery) on its key
// values put in DynamoDB's JSON. A request that fails one goes the JSON
// way, unchanged, to the front and minidyn, which answer it or refuse it
// with DynamoDB's errors (a key named twice in a batch is refused there).

// typedReads is the Serialize-step middleware that answers the plain reads
// of the in-process client without JSON.
type typedReads struct{ f *minidynFront }

func (typedReads) ID() string { return "devstackTypedReads" }

func (m typedReads) HandleSerialize(ctx context.Context, in middleware.SerializeInput, next middleware.SerializeHandler) (middleware.SerializeOutput, middleware.Metadata, error) {
	// A done context fails the call in the HTTP client, as before.
	if ctx.Err() == nil {
		var out any
		switch p := in.Parameters.(type) {
		case *dynamodb.GetItemInput:
			if o, ok := m.f.typedGetItem(p); ok {
				out = o
			}
		case *dynamodb.BatchGetItemInput:
			if o, ok := m.f.typedBatchGetItem(p); ok {
				out = o
			}
		case *dynamodb.QueryInput:
			if o, ok := m.f.typedQuery(p); ok {
				out = o
			}
		}
		if out != nil {
			return middleware.SerializeOutput{Result: out}, middleware.Metadata{}, nil
		}
	}
	return next.HandleSerialize(ctx, in)
}

// addTypedReads puts the typed reads just before the operation's
// serializer.
func addTypedReads(f *minidynFront) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		return s.Serialize.Insert(typedReads{f}, "OperationSerializer", middleware.Before)
	}
}

// typedKey reads key as a primary key of t the way validKey reads its JSON:
// exactly the key attributes, each a non-empty string of a string key. A
// string that is not valid UTF-8 would reach the front as another string
// (the SDK's JSON replaces its bad bytes), so it goes the JSON way.
func (t *tableData) typedKey(key map[string]ddbtypes.AttributeValue) (itemKey, bool) {
	want := 1
	if t.schema.rangeAttr != "" {
		want = 2
	}
	if len(key) != want {
		return itemKey{}, false
	}
	var k itemKey
	for i, attr := range []string{t.schema.hashAttr, t.schema.rangeAttr} {
		if attr == "" {
			continue
		}
		v, ok := key[attr].(*ddbtypes.AttributeValueMemberS)
		if !ok || v == nil || t.attrTypes[attr] != "S" || v.Value == "" || !utf8.ValidString(v.Value) {
			return itemKey{}, false
		}
		kv := keyValue{typ: "S", s: v.Value}
		if i == 0 {
			k.hash = kv
		} else {
			k.rng = kv
		}
	}
	return k, true
}

// plainRead reports whether a read asks for whole items and nothing more,
// as the fields fastRead accepts.
func plainRead(rc ddbtypes.ReturnConsumedCapacity, projection *string, names map[string]string, toGet []string) bool {
	return noCapacity(string(rc)) && projection == nil && names == nil && toGet == nil
}

// table is a table the front keeps, by a name the SDK would send as is.
func (f *minidynFront) table(name *string) *tableData {
	if name == nil || !utf8.ValidString(*name) {
		return nil
	}
	return f.tables[*name]
}

func (f *minidynFront) typedGetItem(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, bool) {
	if !plainRead(in.ReturnConsumedCapacity, in.ProjectionExpression, in.ExpressionAttributeNames, in.AttributesToGet) {
		return nil, false
	}
	f.mu.Lock()
	var found map[string]json.RawMessage
	ok := len(f.emulations) == 0
	if ok {
		var t *tableData
		if t = f.table(in.TableName); t == nil {
			ok = false
		} else if k, valid := t.typedKey(in.Key); !valid {
			ok = false
		} else if it := t.items[k]; it != nil {
			found = it.attrs
		}
	}
	f.mu.Unlock()
	if !ok {
		return nil, false
	}
	out := &dynamodb.GetItemOutput{}
	if found != nil {
		// A stored item's attributes are never changed once stored (a write
		// stores a new item), so they are read outside the lock.
		item, err := sdkItem(found)
		if err != nil {
			return nil, false
		}
		out.Item = item
	}
	return out, true
}

func (f *minidynFront) typedBatchGetItem(in *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, bool) {
	if len(in.RequestItems) == 0 || !noCapacity(string(in.ReturnConsumedCapacity)) {
		return nil, false
	}
	for _, req := range in.RequestItems {
		if len(req.Keys) == 0 || !plainRead("", req.ProjectionExpression, req.ExpressionAttributeNames, req.AttributesToGet) {
			return nil, false
		}
	}
	type tableItems struct {
		name  string
		items []map[string]json.RawMessage
	}
	found := make([]tableItems, 0, len(in.RequestItems))
	ok := func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.emulations) > 0 {
			return false
		}
		// size follows the answer fastBatchGetItem writes, which it bounds
		// by maxFastPage at every item.
		size := len(`{"Responses":{`)
		n := 0
		for name, req := range in.RequestItems {
			t := f.table(&name)
			if t == nil {
				return false
			}
			n += len(req.Keys)
			if n > 100 {
				return false
			}
			if len(found) > 0 {
				size++
			}
			size += jsonStringLen(name) + len(`:[`)
			ti := tableItems{name: name, items: make([]map[string]json.RawMessage, 0, len(req.Keys))}
			seen := make(map[itemKey]bool, len(req.Keys))
			for _, key := range req.Keys {
				k, valid := t.typedKey(key)
				if !valid || seen[k] {
					return false
				}
				seen[k] = true
				it := t.items[k]
				if it == nil {
					continue
				}
				if len(ti.items) > 0 {
					size++
				}
				size += len(it.raw)
				if size > maxFastPage {
					return false
				}
				ti.items = append(ti.items, it.attrs)
			}
			size++ // ]
			found = append(found, ti)
		}
		return true
	}()
	if !ok {
		return nil, false
	}
	out := &dynamodb.BatchGetItemOutput{
		Responses:       make(map[string][]map[string]ddbtypes.AttributeValue, len(found)),
		UnprocessedKeys: map[string]ddbtypes.KeysAndAttributes{},
	}
	for _, ti := range found {
		items := make([]map[string]ddbtypes.AttributeValue, 0, len(ti.items))
		for _, attrs := range ti.items {
			item, err := sdkItem(attrs)
			if err != nil {
				return nil, false
			}
			items = append(items, item)
		}
		out.Responses[ti.name] = items
	}
	return out, true
}

// jsonStringLen is the length of s as writeJSONString writes it.
func jsonStringLen(s string) int {
	if !strings.ContainsAny(s, "\"\\<>&") && isPlainASCII(s) {
		return len(s) + 2
	}
	enc, _ := json.Marshal(s)
	return len(enc)
}

func (f *minidynFront) typedQuery(in *dynamodb.QueryInput) (*dynamodb.QueryOutput, bool) {
	// The fields fastQuery refuses (decodeStrict) send the query the JSON
	// way; an empty map or name would reach it as one, which DynamoDB
	// refuses.
	if in.AttributesToGet != nil || in.ConditionalOperator != "" || in.FilterExpression != nil || in.KeyConditions != nil ||
		in.ProjectionExpression != nil || in.QueryFilter != nil || in.Select != "" || in.TableName == nil ||
		(in.IndexName != nil && *in.IndexName == "") || (in.ExpressionAttributeNames != nil && len(in.ExpressionAttributeNames) == 0) ||
		(in.ExpressionAttributeValues != nil && len(in.ExpressionAttributeValues) == 0) || !utf8.ValidString(*in.TableName) ||
		(in.IndexName != nil && !utf8.ValidString(*in.IndexName)) || (in.KeyConditionExpression != nil && !utf8.ValidString(*in.KeyConditionExpression)) {
		return nil, false
	}
	// The query as fastQuery reads it from JSON, so the same checks judge
	// it; only key values can be part of a query the front answers.
	q := queryInput{
		TableName:                *in.TableName,
		ExpressionAttributeNames: in.ExpressionAttributeNames,
		ScanIndexForward:         in.ScanIndexForward,
		ConsistentRead:           in.ConsistentRead,
		ReturnConsumedCapacity:   string(in.ReturnConsumedCapacity),
	}
	if in.IndexName != nil {
		q.IndexName = *in.IndexName
	}
	if in.KeyConditionExpression != nil {
		q.KeyConditionExpression = *in.KeyConditionExpression
	}
	if in.Limit != nil {
		limit := int(*in.Limit)
		q.Limit = &limit
	}
	for name := range in.ExpressionAttributeNames {
		if !utf8.ValidString(name) || !utf8.ValidString(in.ExpressionAttributeNames[name]) {
			return nil, false
		}
	}
	var ok bool
	if q.ExpressionAttributeValues, ok = wireKeyValues(in.ExpressionAttributeValues); !ok {
		return nil, false
	}
	if q.ExclusiveStartKey, ok = wireKeyValues(in.ExclusiveStartKey); !ok {
		return nil, false
	}
	f.mu.Lock()
	var (
		items   []map[string]json.RawMessage
		lastKey map[string]json.RawMessage
	)
	page, ok := queryPage{}, len(f.emulations) == 0
	if ok {
		page, ok = f.readQuery(q)
	}
	if ok {
		// The items' attributes as the index projects them. A stored item's
		// attributes are never changed (a write stores a new item), so what
		// is read here is decoded after the lock.
		items = make([]map[string]json.RawMessage, len(page.items))
		for i, it := range page.items {
			if page.ix.projection == "ALL" {
				items[i] = it.attrs
				continue
			}
			items[i] = selectAttrs(it.attrs, func(attr string) bool { return page.ix.projects(page.t, attr) })
		}
		if page.more {
			lastKey = selectAttrs(page.items[len(page.items)-1].attrs, page.lastKeyAttr)
		}
	}
	f.mu.Unlock()
	if !ok {
		return nil, false
	}
	out := &dynamodb.QueryOutput{
		Count:        int32(len(items)),
		ScannedCount: int32(len(items)),
		Items:        make([]map[string]ddbtypes.AttributeValue, 0, len(items)),
	}
	for _, attrs := range items {
		item, err := sdkItem(attrs)
		if err != nil {
			return nil, false
		}
		out.Items = append(out.Items, item)
	}
	if lastKey != nil {
		k, err := sdkItem(lastKey)
		if err != nil {
			return nil, false
		}
		out.LastEvaluatedKey = k
	}
	return out, true
}

// selectAttrs is the attributes of attrs that keep selects.
func selectAttrs(attrs map[string]json.RawMessage, keep func(string) bool) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(attrs))
	for name, raw := range attrs {
		if keep(name) {
			out[name] = raw
		}
	}
	return out
}
