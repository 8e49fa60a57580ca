package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// CallCounter counts DynamoDB operations by name, and the writes they make:
// for every write, the partition key it lands on in the table and in each
// index (Schema.Indexes) it changes, with the write units it costs. Benchmarks
// and tests attach it to a client to show what a request costs in round
// trips, and how writes spread over partition keys.
//
// Write units follow DynamoDB's billing: one per started KB of the item
// (the larger of its old and new image), twice that inside a transaction
// (condition checks included), and one per started KB of each index entry
// put or deleted. An index is written only when the write changes its keys
// or an attribute it projects (Index.Projects); a changed key is a delete of
// the old entry and a put of the new one. The old image is the item as this
// counter last saw it (written, or read by GetItem, BatchGetItem, a query of
// the table, or returned by a write); a write to an item it never saw is
// costed from what the request carries. A refused conditional write costs
// its base units and writes no index.
type CallCounter struct {
	mu     sync.Mutex
	counts map[string]int
	writes map[string]*PartitionWrites
	units  int
	seen   map[string]map[string]types.AttributeValue
}

// PartitionWrites is what one partition key of the table or an index took.
type PartitionWrites struct {
	// Where is "table" or an index name; Key is the partition key value.
	Where  string `json:"where"`
	Key    string `json:"key"`
	Writes int    `json:"writes"`
	Units  int    `json:"units"`
}

// NewCallCounter returns an empty counter.
func NewCallCounter() *CallCounter {
	c := &CallCounter{}
	c.Reset()
	return c
}

// Option attaches the counter to a DynamoDB client:
// dynamodb.NewFromConfig(cfg, counter.Option) or client.Options().Copy.
func (c *CallCounter) Option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("envleaseCallCounter",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				c.mu.Lock()
				c.counts[middleware.GetOperationName(ctx)]++
				c.mu.Unlock()
				out, md, err := next.HandleInitialize(ctx, in)
				c.observe(in.Parameters, out.Result, err)
				return out, md, err
			}), middleware.After)
	})
}

// Total returns the number of calls counted.
func (c *CallCounter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n
}

// Counts returns a copy of the per-operation counts.
func (c *CallCounter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// WriteUnits returns the write units counted.
func (c *CallCounter) WriteUnits() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.units
}

// Partitions returns the writes per partition key (table and indexes), most
// written first.
func (c *CallCounter) Partitions() []PartitionWrites {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]PartitionWrites, 0, len(c.writes))
	for _, w := range c.writes {
		out = append(out, *w)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Units != out[j].Units {
			return out[i].Units > out[j].Units
		}
		return out[i].Where+out[i].Key < out[j].Where+out[j].Key
	})
	return out
}

// Reset zeroes the counter and forgets the items it saw.
func (c *CallCounter) Reset() {
	c.mu.Lock()
	c.counts = map[string]int{}
	c.writes = map[string]*PartitionWrites{}
	c.units = 0
	c.seen = map[string]map[string]types.AttributeValue{}
	c.mu.Unlock()
}

// ResetWrites zeroes the calls and writes counted but keeps the items seen,
// so writes after it are still costed from the images known before.
func (c *CallCounter) ResetWrites() {
	c.mu.Lock()
	c.counts = map[string]int{}
	c.writes = map[string]*PartitionWrites{}
	c.units = 0
	c.mu.Unlock()
}

// observe records what one call wrote (and the item images it read).
func (c *CallCounter) observe(params, result any, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok := err == nil
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		if out, _ := result.(*dynamodb.GetItemOutput); out != nil && out.Item != nil {
			c.remember(out.Item)
		}
	case *dynamodb.BatchGetItemInput:
		if out, _ := result.(*dynamodb.BatchGetItemOutput); out != nil {
			for _, items := range out.Responses {
				for _, it := range items {
					c.remember(it)
				}
			}
		}
	case *dynamodb.QueryInput:
		if out, _ := result.(*dynamodb.QueryOutput); out != nil && in.IndexName == nil {
			for _, it := range out.Items {
				c.remember(it)
			}
		}
	case *dynamodb.PutItemInput:
		c.put(in.Item, 1, ok)
	case *dynamodb.DeleteItemInput:
		c.del(in.Key, 1, ok)
	case *dynamodb.UpdateItemInput:
		var after map[string]types.AttributeValue
		if out, _ := result.(*dynamodb.UpdateItemOutput); out != nil && in.ReturnValues == types.ReturnValueAllNew {
			after = out.Attributes
		}
		c.update(in.Key, in.UpdateExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues, after, 1, ok)
	case *dynamodb.BatchWriteItemInput:
		var left map[string][]types.WriteRequest
		if out, _ := result.(*dynamodb.BatchWriteItemOutput); out != nil {
			left = out.UnprocessedItems
		}
		for table, reqs := range in.RequestItems {
			skip := map[string]bool{}
			for _, r := range left[table] {
				skip[writeRequestKey(r)] = true
			}
			for _, r := range reqs {
				if skip[writeRequestKey(r)] {
					continue
				}
				if r.PutRequest != nil {
					c.put(r.PutRequest.Item, 1, ok)
				} else if r.DeleteRequest != nil {
					c.del(r.DeleteRequest.Key, 1, ok)
				}
			}
		}
	case *dynamodb.TransactWriteItemsInput:
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				c.put(it.Put.Item, 2, ok)
			case it.Delete != nil:
				c.del(it.Delete.Key, 2, ok)
			case it.Update != nil:
				u := it.Update
				c.update(u.Key, u.UpdateExpression, u.ExpressionAttributeNames, u.ExpressionAttributeValues, nil, 2, ok)
			case it.ConditionCheck != nil:
				old := c.seen[itemKeyString(it.ConditionCheck.Key)]
				c.add("table", attrString(it.ConditionCheck.Key[AttrPK]), 2*itemUnits(max(itemSize(old), itemSize(it.ConditionCheck.Key))))
			}
		}
	}
}

func writeRequestKey(r types.WriteRequest) string {
	if r.PutRequest != nil {
		return itemKeyString(r.PutRequest.Item)
	}
	if r.DeleteRequest != nil {
		return itemKeyString(r.DeleteRequest.Key)
	}
	return ""
}

func (c *CallCounter) remember(item map[string]types.AttributeValue) {
	c.seen[itemKeyString(item)] = item
}

func (c *CallCounter) add(where, key string, units int) {
	k := where + " " + key
	w := c.writes[k]
	if w == nil {
		w = &PartitionWrites{Where: where, Key: key}
		c.writes[k] = w
	}
	w.Writes++
	w.Units += units
	c.units += units
}

// write records a write that takes the item from old to new (either may be
// nil) at mult times the units (2 in a transaction).
func (c *CallCounter) write(key map[string]types.AttributeValue, old, new map[string]types.AttributeValue, changed map[string]bool, mult int, ok bool) {
	c.add("table", attrString(key[AttrPK]), mult*itemUnits(max(itemSize(old), itemSize(new), itemSize(key))))
	if !ok {
		return
	}
	for _, ix := range Schema.Indexes {
		oldPK, oldIn := indexKeys(ix, old)
		newPK, newIn := indexKeys(ix, new)
		keyChanged := oldIn != newIn || oldIn && (attrString(old[ix.PartitionKey]) != attrString(new[ix.PartitionKey]) ||
			attrString(old[ix.SortKey]) != attrString(new[ix.SortKey]))
		switch {
		case keyChanged:
			if oldIn {
				c.add(ix.Name, oldPK, itemUnits(entrySize(ix, old)))
			}
			if newIn {
				c.add(ix.Name, newPK, itemUnits(entrySize(ix, new)))
			}
		case newIn:
			for a := range changed {
				if ix.Projects(a) {
					c.add(ix.Name, newPK, itemUnits(entrySize(ix, new)))
					break
				}
			}
		}
	}
	if new == nil {
		delete(c.seen, itemKeyString(key))
	} else {
		c.seen[itemKeyString(key)] = new
	}
}

func (c *CallCounter) put(item map[string]types.AttributeValue, mult int, ok bool) {
	old := c.seen[itemKeyString(item)]
	changed := map[string]bool{}
	for a, v := range item {
		if old == nil || fmt.Sprint(old[a]) != fmt.Sprint(v) {
			changed[a] = true
		}
	}
	for a := range old {
		if _, kept := item[a]; !kept {
			changed[a] = true
		}
	}
	c.write(item, old, item, changed, mult, ok)
}

func (c *CallCounter) del(key map[string]types.AttributeValue, mult int, ok bool) {
	old := c.seen[itemKeyString(key)]
	changed := map[string]bool{}
	for a := range old {
		changed[a] = true
	}
	c.write(key, old, nil, changed, mult, ok)
}

// update applies an update expression to the image known (or to the key
// alone): "a = :v" sets a to the value; any other right-hand side (a sum,
// if_not_exists, list_append) and ADD change a to a value the counter does
// not know, which it keeps as a placeholder of the same kind; REMOVE drops a.
func (c *CallCounter) update(key map[string]types.AttributeValue, expr *string, names map[string]string, vals map[string]types.AttributeValue, returned map[string]types.AttributeValue, mult int, ok bool) {
	old := c.seen[itemKeyString(key)]
	next := map[string]types.AttributeValue{}
	for a, v := range old {
		next[a] = v
	}
	for a, v := range key {
		next[a] = v
	}
	changed := map[string]bool{}
	name := func(s string) string {
		s = strings.TrimSpace(s)
		if n, ok := names[s]; ok {
			return n
		}
		return s
	}
	if expr != nil {
		for _, cl := range splitClauses(*expr) {
			switch cl.verb {
			case "SET":
				for _, asg := range splitTop(cl.body) {
					lhs, rhs, found := strings.Cut(asg, "=")
					if !found {
						continue
					}
					a := name(lhs)
					changed[a] = true
					if v, ok := vals[strings.TrimSpace(rhs)]; ok {
						next[a] = v
					} else if _, had := next[a]; !had {
						next[a] = &types.AttributeValueMemberN{Value: "0"}
					}
				}
			case "REMOVE":
				for _, a := range splitTop(cl.body) {
					changed[name(a)] = true
					delete(next, name(a))
				}
			case "ADD", "DELETE":
				for _, part := range splitTop(cl.body) {
					f := strings.Fields(part)
					if len(f) == 2 {
						a := name(f[0])
						changed[a] = true
						if _, had := next[a]; !had {
							next[a] = vals[f[1]]
						}
					}
				}
			}
		}
	}
	if returned != nil {
		next = returned
	}
	c.write(key, old, next, changed, mult, ok)
}

type clause struct{ verb, body string }

// splitClauses cuts an update expression at its SET, REMOVE, ADD and DELETE
// keywords.
func splitClauses(expr string) []clause {
	var out []clause
	f := strings.Fields(expr)
	var cur *clause
	for _, w := range f {
		switch strings.ToUpper(w) {
		case "SET", "REMOVE", "ADD", "DELETE":
			out = append(out, clause{verb: strings.ToUpper(w)})
			cur = &out[len(out)-1]
			continue
		}
		if cur != nil {
			cur.body += w + " "
		}
	}
	return out
}

// splitTop splits at commas outside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if rest := strings.TrimSpace(s[start:]); rest != "" {
		out = append(out, rest)
	}
	return out
}

// indexKeys returns item's partition key in ix and whether it is in ix at all.
func indexKeys(ix Index, item map[string]types.AttributeValue) (string, bool) {
	if item == nil || item[ix.PartitionKey] == nil || item[ix.SortKey] == nil {
		return "", false
	}
	return attrString(item[ix.PartitionKey]), true
}

// entrySize is an index entry's size: its projected attributes and the
// 100 bytes of overhead DynamoDB adds to every index entry.
func entrySize(ix Index, item map[string]types.AttributeValue) int {
	n := 100
	for a, v := range item {
		if ix.Projects(a) {
			n += len(a) + valueSize(v)
		}
	}
	return n
}

func itemUnits(size int) int { return max(1, (size+1023)/1024) }

// itemSize follows DynamoDB's item size: attribute names plus values.
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for a, v := range item {
		n += len(a) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return len(x.Value)
	case *types.AttributeValueMemberN:
		return len(x.Value)/2 + 1
	case *types.AttributeValueMemberB:
		return len(x.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 3
		for _, s := range x.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 3
		for _, s := range x.Value {
			n += len(s)/2 + 1
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 3
		for _, b := range x.Value {
			n += len(b)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range x.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range x.Value {
			n += 1 + len(k) + valueSize(e)
		}
		return n
	}
	return 0
}

// WithClient returns a store that shares s's table through another client,
// e.g. one with a CallCounter attached.
func (s *Store) WithClient(db *dynamodb.Client) *Store {
	return &Store{db: db, table: s.table, shards: s.shards, clock: s.clock, changes: s.changes, due: s.due}
}
