package devstack

import (
	"bytes"
	"encoding/json"
	"github.com/truora/minidyn/core"
	"github.com/truora/minidyn/types"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// minidynFront keeps the tables' items itself, in key order per table and
// per index, and hands minidyn, for each request, only the items that
// request can read or write. minidyn still decides everything a request
// means (conditions, update expressions, projections, filters, limits,
// transactions and their cancellation reasons, validation and the error
// shapes), but on a handful of items: as a single table, it deep-copied the
// whole table for every transaction and read the whole table for every
// query, so the local stack slowed in proportion to everything ever leased
// (docs/performance.md has the figures).
//
// Each request runs alone: the scratch minidyn is emptied, the request's
// items are put into it, the request is served, and the items it may have
// written are read back and kept. A query is given only its partition's
// range of its index (after its ExclusiveStartKey, and no more than its
// Limit), which is what DynamoDB reads for it.
type minidynFront struct {
	mu      sync.Mutex
	scratch http.Handler
	clear   func() error
	tables  map[string]*tableData
	// typed are the scratch minidyn's own tables, read for what a write
	// left (minidyntyped.go).
	typed map[string]*core.Table
	// emulations are the failure emulations a test turned on (Minidyn);
	// while there are any, every request goes to minidyn.
	emulations map[emulationKey]bool
}

func newMinidynFront(scratch http.Handler, clear func() error, typed map[string]*core.Table) *minidynFront {
	return &minidynFront{scratch: scratch, clear: clear, tables: map[string]*tableData{}, typed: typed, emulations: map[emulationKey]bool{}}
}

// answer is one response of the scratch minidyn, held whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) ok() bool { return a.status == http.StatusOK }

func (a answer) writeTo(w http.ResponseWriter) {
	for k, v := range a.header {
		w.Header()[k] = v
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// call sends one request of operation op to the scratch minidyn.
func (f *minidynFront) call(op string, body []byte) answer {
	r, _ := http.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header.Set("X-Amz-Target", "DynamoDB_20120810."+op)
	r.Header.Set("Content-Type", "application/x-amz-json-1.0")
	rec := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
	f.scratch.ServeHTTP(rec, r)
	return answer{status: rec.status, header: rec.header, body: rec.body.Bytes()}
}

// namedKey is an item key a request names, in wire form and parsed.
type namedKey struct {
	table string
	raw   map[string]json.RawMessage
}

func (f *minidynFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		f.scratch.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	target := r.Header.Get("X-Amz-Target")
	op := target[strings.LastIndex(target, ".")+1:]

	f.mu.Lock()
	defer f.mu.Unlock()
	a, err := f.serve(op, body)
	if err != nil {
		// Only a broken invariant of the front itself lands here.
		http.Error(w, "local dynamodb front: "+err.Error(), http.StatusInternalServerError)
		return
	}
	a.writeTo(w)
}

// serve runs one request on the scratch minidyn with the items it needs.
func (f *minidynFront) serve(op string, body []byte) (answer, error) {
	if a, ok := f.fastRead(op, body); ok {
		return a, nil
	}
	if err := f.clear(); err != nil {
		return answer{}, err
	}
	switch op {
	case "CreateTable", "DeleteTable", "UpdateTable":
		a := f.call(op, body)
		if a.ok() {
			if err := f.tableChanged(op, body); err != nil {
				return answer{}, err
			}
		}
		return a, nil
	case "Query":
		return f.query(body)
	case "Scan":
		var in struct{ TableName string }
		if err := json.Unmarshal(body, &in); err != nil {
			return f.call(op, body), nil
		}
		// A scan reads the whole table, as it does on DynamoDB.
		if t := f.tables[in.TableName]; t != nil {
			var items []*storedItem
			for _, it := range t.items {
				items = append(items, it)
			}
			if a, ok := f.load(in.TableName, items); !ok {
				return a, nil
			}
		}
		return f.call(op, body), nil
	}
	keys, writes, err := namedKeys(op, body)
	if err != nil || len(keys) == 0 {
		// Not a request about items, or one minidyn will refuse as malformed.
		return f.call(op, body), nil
	}
	for _, k := range keys {
		t := f.tables[k.table]
		if t == nil {
			continue
		}
		kk, ok := t.keyFromAttrs(k.raw)
		if !ok {
			continue // minidyn answers the invalid key
		}
		if it := t.items[kk]; it != nil {
			if a, ok := f.load(k.table, []*storedItem{it}); !ok {
				return a, nil
			}
		}
	}
	a := f.call(op, body)
	if !a.ok() || !writes {
		return a, nil
	}
	return a, f.readBack(keys)
}

// load puts items into the scratch table. An answer that is not OK (the
// failure emulation of a test is on) is the request's answer.
func (f *minidynFront) load(table string, items []*storedItem) (answer, bool) {
	name, _ := json.Marshal(table)
	scratch := f.typed[table]
	for _, it := range items {
		// Straight into minidyn's table, as its PutItem stores it: the item
		// is valid (minidyn wrote it). While a failure is emulated, through
		// PutItem, which the emulation fails.
		if scratch != nil && len(f.emulations) == 0 {
			if typed, err := wireTyped(it.attrs); err == nil {
				if _, err := scratch.Put(&types.PutItemInput{Item: typed}); err == nil {
					continue
				}
			}
		}
		var b bytes.Buffer
		b.WriteString(`{"TableName":`)
		b.Write(name)
		b.WriteString(`,"Item":`)
		b.Write(it.raw)
		b.WriteString(`}`)
		if a := f.call("PutItem", b.Bytes()); !a.ok() {
			return a, false
		}
	}
	return answer{}, true
}

// readBack keeps what the scratch table now holds under each key a write
// named: the new item, or none.
func (f *minidynFront) readBack(keys []namedKey) error {
	for _, k := range keys {
		t := f.tables[k.table]
		if t == nil {
			continue
		}
		kk, ok := t.keyFromAttrs(k.raw)
		if !ok {
			continue
		}
		item := typedItem(f.typed[k.table], t.schema, k.raw)
		if err := t.set(kk, item); err != nil {
			return err
		}
	}
	return nil
}

// namedKeys lists the items a request reads or writes, and whether it may
// write any.
func namedKeys(op string, body []byte) (keys []namedKey, writes bool, err error) {
	type keyed struct {
		TableName string
		Key       map[string]json.RawMessage
		Item      map[string]json.RawMessage
	}
	one := func(k keyed) {
		m := k.Key
		if m == nil {
			m = k.Item
		}
		if m != nil {
			keys = append(keys, namedKey{table: k.TableName, raw: m})
		}
	}
	switch op {
	case "GetItem", "PutItem", "UpdateItem", "DeleteItem":
		var in keyed
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, false, err
		}
		one(in)
		return keys, op != "GetItem", nil
	case "BatchGetItem":
		var in struct {
			RequestItems map[string]struct{ Keys []map[string]json.RawMessage }
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, false, err
		}
		for table, ka := range in.RequestItems {
			for _, k := range ka.Keys {
				keys = append(keys, namedKey{table: table, raw: k})
			}
		}
		return keys, false, nil
	case "BatchWriteItem":
		var in struct {
			RequestItems map[string][]struct {
				PutRequest    *struct{ Item map[string]json.RawMessage }
				DeleteRequest *struct{ Key map[string]json.RawMessage }
			}
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, false, err
		}
		for table, reqs := range in.RequestItems {
			for _, r := range reqs {
				switch {
				case r.PutRequest != nil:
					keys = append(keys, namedKey{table: table, raw: r.PutRequest.Item})
				case r.DeleteRequest != nil:
					keys = append(keys, namedKey{table: table, raw: r.DeleteRequest.Key})
				}
			}
		}
		return keys, true, nil
	case "TransactGetItems":
		var in struct{ TransactItems []struct{ Get *keyed } }
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, false, err
		}
		for _, ti := range in.TransactItems {
			if ti.Get != nil {
				one(*ti.Get)
			}
		}
		return keys, false, nil
	case "TransactWriteItems":
		var in struct {
			TransactItems []struct{ Put, Update, Delete, ConditionCheck *keyed }
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, false, err
		}
		for _, ti := range in.TransactItems {
			for _, k := range []*keyed{ti.Put, ti.Update, ti.Delete, ti.ConditionCheck} {
				if k != nil {
					one(*k)
				}
			}
		}
		return keys, true, nil
	}
	return nil, false, nil
}

// tableChanged follows a table created, deleted or given a new index.
func (f *minidynFront) tableChanged(op string, body []byte) error {
	type keyElem struct{ AttributeName, KeyType string }
	type indexDef struct {
		IndexName  string
		KeySchema  []keyElem
		Projection struct {
			ProjectionType   string
			NonKeyAttributes []string
		}
	}
	schemaOf := func(elems []keyElem) keySchema {
		var ks keySchema
		for _, e := range elems {
			if e.KeyType == "HASH" {
				ks.hashAttr = e.AttributeName
			} else {
				ks.rangeAttr = e.AttributeName
			}
		}
		return ks
	}
	var in struct {
		TableName                   string
		KeySchema                   []keyElem
		AttributeDefinitions        []struct{ AttributeName, AttributeType string }
		GlobalSecondaryIndexes      []indexDef
		LocalSecondaryIndexes       []indexDef
		GlobalSecondaryIndexUpdates []struct {
			Create *indexDef
			Delete *struct{ IndexName string }
		}
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return err
	}
	switch op {
	case "CreateTable":
		t := newTableData(in.TableName, schemaOf(in.KeySchema))
		for _, ad := range in.AttributeDefinitions {
			t.attrTypes[ad.AttributeName] = ad.AttributeType
		}
		for _, ix := range append(in.GlobalSecondaryIndexes, in.LocalSecondaryIndexes...) {
			t.addIndex(ix.IndexName, schemaOf(ix.KeySchema), ix.Projection.ProjectionType, ix.Projection.NonKeyAttributes)
		}
		f.tables[in.TableName] = t
	case "DeleteTable":
		delete(f.tables, in.TableName)
	case "UpdateTable":
		t := f.tables[in.TableName]
		if t == nil {
			return nil
		}
		for _, ad := range in.AttributeDefinitions {
			t.attrTypes[ad.AttributeName] = ad.AttributeType
		}
		for _, u := range in.GlobalSecondaryIndexUpdates {
			switch {
			case u.Create != nil:
				t.addIndex(u.Create.IndexName, schemaOf(u.Create.KeySchema), u.Create.Projection.ProjectionType, u.Create.Projection.NonKeyAttributes)
			case u.Delete != nil:
				delete(t.indexes, u.Delete.IndexName)
			}
		}
	}
	return nil
}

// queryInput is what the front reads of a Query: the fields fastQuery
// accepts (it refuses any other), of which query uses the key's.
type queryInput struct {
	TableName                 string
	IndexName                 string
	KeyConditionExpression    string
	ExpressionAttributeNames  map[string]string
	ExpressionAttributeValues map[string]json.RawMessage
	ExclusiveStartKey         map[string]json.RawMessage
	Limit                     *int
	ScanIndexForward          *bool
	ConsistentRead            *bool
	ReturnConsumedCapacity    string
}

// query hands minidyn the query's partition range of its index, no more
// than Limit items of it from where the previous page ended. A key
// condition the front does not read gets the whole index instead.
func (f *minidynFront) query(body []byte) (answer, error) {
	var in queryInput
	if err := json.Unmarshal(body, &in); err != nil {
		return f.call("Query", body), nil
	}
	t := f.tables[in.TableName]
	if t == nil {
		return f.call("Query", body), nil
	}
	ix := t.primary
	if in.IndexName != "" {
		if ix = t.indexes[in.IndexName]; ix == nil {
			// DynamoDB's answer; minidyn panics on an index it lacks.
			return validationError("The table does not have the specified index: " + in.IndexName), nil
		}
	}
	kc, ok := parseKeyCondition(in.KeyConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues, ix.schema)
	var start *indexEntry
	if ok && in.ExclusiveStartKey != nil {
		h, r, hasIndexKey := ix.schema.keyOf(in.ExclusiveStartKey)
		base, hasBaseKey := t.keyFromAttrs(in.ExclusiveStartKey)
		if !hasIndexKey || !hasBaseKey {
			ok = false // minidyn judges the odd start key, on the whole index
		} else {
			start = &indexEntry{hash: h, rng: r, base: base}
		}
	}
	var items []*storedItem
	if !ok {
		ix.entries.Ascend(func(e indexEntry) bool {
			items = append(items, e.item)
			return true
		})
		if a, loaded := f.load(in.TableName, items); !loaded {
			return a, nil
		}
		return f.call("Query", body), nil
	}
	forward := in.ScanIndexForward == nil || *in.ScanIndexForward
	limit := -1
	if in.Limit != nil && *in.Limit > 0 {
		limit = *in.Limit
	}
	ix.walk(kc.hash, kc.rng, forward, start, func(e indexEntry) bool {
		items = append(items, e.item)
		return limit < 0 || len(items) < limit
	})
	if a, loaded := f.load(in.TableName, items); !loaded {
		return a, nil
	}
	if start != nil {
		// The scratch table starts where this page starts; minidyn would
		// look for the start key's item, which it no longer holds.
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(body, &raw); err != nil {
			return answer{}, err
		}
		delete(raw, "ExclusiveStartKey")
		var err error
		if body, err = json.Marshal(raw); err != nil {
			return answer{}, err
		}
	}
	a := f.call("Query", body)
	if a.ok() && limit > 0 && len(items) == limit {
		// The page ends at the last item in the front's order, as the next
		// page's start key will be read in it: minidyn orders items that
		// tie on the index's key by another rule, so its own last key could
		// repeat items on the next page. DynamoDB answers a start key once
		// Limit items were read, as here.
		if err := a.setLastKey(items[len(items)-1], t.schema, ix.schema); err != nil {
			return answer{}, err
		}
	}
	return a, nil
}

// setLastKey makes the table and index key attributes of it the answer's
// LastEvaluatedKey.
func (a *answer) setLastKey(it *storedItem, schemas ...keySchema) error {
	var out map[string]json.RawMessage
	if err := json.Unmarshal(a.body, &out); err != nil {
		return err
	}
	last := map[string]json.RawMessage{}
	for _, ks := range schemas {
		for _, attr := range []string{ks.hashAttr, ks.rangeAttr} {
			if v, ok := it.attrs[attr]; ok && attr != "" {
				last[attr] = v
			}
		}
	}
	key, err := json.Marshal(last)
	if err != nil {
		return err
	}
	out["LastEvaluatedKey"] = key
	if a.body, err = json.Marshal(out); err != nil {
		return err
	}
	a.header.Del("Content-Length")
	return nil
}

// ttlKeptAfter is how far back DynamoDB's TTL looks: an item whose TTL
// attribute is more than five years in the past is not deleted.
const ttlKeptAfter = 5 * 365 * 24 * time.Hour

// expire deletes the items whose attribute attr, epoch seconds as a Number,
// is at or before now (and within DynamoDB's five years of it). It returns
// how many it deleted.
func (f *minidynFront) expire(attr string, now time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	oldest := now.Add(-ttlKeptAfter).Unix()
	for _, t := range f.tables {
		for k, it := range t.items {
			raw, ok := it.attrs[attr]
			if !ok {
				continue
			}
			v, ok := parseKeyValue(raw)
			if !ok || v.typ != "N" {
				continue
			}
			at, err := strconv.ParseFloat(v.s, 64)
			if err != nil || at > float64(now.Unix()) || at < float64(oldest) {
				continue
			}
			// set with no item only drops it from the maps; it cannot fail.
			_ = t.set(k, nil)
			n++
		}
	}
	return n
}
