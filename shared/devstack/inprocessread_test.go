package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/truora/minidyn/server"

	"github.com/envlease/envlease/shared/store"
)

// countedDoer counts the requests that reach the HTTP client: those the
// typed reads left to the JSON way.
type countedDoer struct {
	inner interface {
		Do(*http.Request) (*http.Response, error)
	}
	n *atomic.Int64
}

func (c countedDoer) Do(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.inner.Do(r)
}

// typedClients are the stack's in-process client, counting its round trips
// through JSON, and the same client without the typed reads: the JSON way
// every read took before.
type typedClients struct {
	typed, json *dynamodb.Client
	trips       atomic.Int64
}

func newTypedClients(t *testing.T, d *Dynamo) *typedClients {
	t.Helper()
	c := &typedClients{}
	base := d.Client(t.Context())
	c.typed = dynamodb.New(base.Options(), func(o *dynamodb.Options) {
		o.HTTPClient = countedDoer{inner: o.HTTPClient, n: &c.trips}
	})
	c.json = dynamodb.New(base.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			_, err := s.Serialize.Remove(typedReads{}.ID())
			return err
		})
	})
	return c
}

// call runs one read through both clients and fails the test unless they
// give the same output or the same error. It returns the typed one's
// output, and whether the typed read answered it without a JSON round trip.
func (c *typedClients) call(t *testing.T, read func(*dynamodb.Client) (any, error)) (any, bool) {
	t.Helper()
	before := c.trips.Load()
	got, gotErr := read(c.typed)
	typed := c.trips.Load() == before
	want, wantErr := read(c.json)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("typed: %v; json: %v", gotErr, wantErr)
	}
	if gotErr != nil {
		var g, w smithy.APIError
		if !errors.As(gotErr, &g) || !errors.As(wantErr, &w) || g.ErrorCode() != w.ErrorCode() || g.ErrorMessage() != w.ErrorMessage() {
			t.Fatalf("typed error %v; json error %v", gotErr, wantErr)
		}
		return nil, typed
	}
	if !reflect.DeepEqual(withoutMetadata(got), withoutMetadata(want)) {
		t.Fatalf("typed and json answers differ:\ntyped %s\njson  %s", render(got), render(want))
	}
	return got, typed
}

// withoutMetadata drops the transport's metadata (a JSON round trip
// records its HTTP response there), which is not part of the answer.
func withoutMetadata(out any) any {
	switch o := out.(type) {
	case *dynamodb.GetItemOutput:
		c := *o
		c.ResultMetadata = middleware.Metadata{}
		return &c
	case *dynamodb.BatchGetItemOutput:
		c := *o
		c.ResultMetadata = middleware.Metadata{}
		return &c
	case *dynamodb.QueryOutput:
		c := *o
		c.ResultMetadata = middleware.Metadata{}
		return &c
	}
	return out
}

func render(v any) string {
	b, err := json.Marshal(withoutMetadata(v))
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

func getItem(table string, k map[string]ddbtypes.AttributeValue, opts ...func(*dynamodb.GetItemInput)) func(*dynamodb.Client) (any, error) {
	return func(db *dynamodb.Client) (any, error) {
		in := &dynamodb.GetItemInput{TableName: aws.String(table), Key: k}
		for _, o := range opts {
			o(in)
		}
		return db.GetItem(context.Background(), in)
	}
}

func batchGet(req map[string]ddbtypes.KeysAndAttributes, opts ...func(*dynamodb.BatchGetItemInput)) func(*dynamodb.Client) (any, error) {
	return func(db *dynamodb.Client) (any, error) {
		in := &dynamodb.BatchGetItemInput{RequestItems: req}
		for _, o := range opts {
			o(in)
		}
		return db.BatchGetItem(context.Background(), in)
	}
}

func query(in dynamodb.QueryInput) func(*dynamodb.Client) (any, error) {
	return func(db *dynamodb.Client) (any, error) {
		in := in
		if in.TableName == nil {
			in.TableName = aws.String(TestTable)
		}
		return db.Query(context.Background(), &in)
	}
}

func vals(kv ...string) map[string]ddbtypes.AttributeValue {
	out := map[string]ddbtypes.AttributeValue{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = s(kv[i+1])
	}
	return out
}

func pkey(pk, sk string) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{"PK": s(pk), "SK": s(sk)}
}

// everyType is an item with an attribute of every type DynamoDB has,
// nested and empty ones among them, and strings JSON escapes.
func everyType(pk, sk string) map[string]ddbtypes.AttributeValue {
	n := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberN{Value: v} }
	m := func(kv map[string]ddbtypes.AttributeValue) ddbtypes.AttributeValue {
		return &ddbtypes.AttributeValueMemberM{Value: kv}
	}
	l := func(vs ...ddbtypes.AttributeValue) ddbtypes.AttributeValue {
		return &ddbtypes.AttributeValueMemberL{Value: append([]ddbtypes.AttributeValue{}, vs...)}
	}
	return map[string]ddbtypes.AttributeValue{
		"PK": s(pk), "SK": s(sk),
		"plain":    s("running"),
		"escaped":  s("a \"quoted\" \\ back\nslash\ttab <b>&amp; \u2028"),
		"unicode":  s("héllo wörld ✓ 🚀 日本"),
		"int":      n("42"),
		"decimal":  n("-3.14159265358979323846"),
		"exponent": n("1E+5"),
		"binary":   &ddbtypes.AttributeValueMemberB{Value: []byte{0, 1, 2, 0xfe, 0xff, '"', '\\'}},
		"yes":      &ddbtypes.AttributeValueMemberBOOL{Value: true},
		"no":       &ddbtypes.AttributeValueMemberBOOL{Value: false},
		"nothing":  &ddbtypes.AttributeValueMemberNULL{Value: true},
		"strings":  &ddbtypes.AttributeValueMemberSS{Value: []string{"a", "b \"c\"", "ü"}},
		"numbers":  &ddbtypes.AttributeValueMemberNS{Value: []string{"1", "2.5", "-7"}},
		"binaries": &ddbtypes.AttributeValueMemberBS{Value: [][]byte{{1}, {2, 3}, {0xff}}},
		"emptyL":   l(),
		"emptyM":   m(map[string]ddbtypes.AttributeValue{}),
		"list":     l(s("x"), n("1"), l(), m(map[string]ddbtypes.AttributeValue{}), l(s("deep"), m(map[string]ddbtypes.AttributeValue{"k": s("v")}))),
		"map": m(map[string]ddbtypes.AttributeValue{
			"name with space": s("v"), "n": n("0"), "nested": m(map[string]ddbtypes.AttributeValue{
				"list": l(&ddbtypes.AttributeValueMemberBOOL{Value: true}, &ddbtypes.AttributeValueMemberNULL{Value: true}),
				"set":  &ddbtypes.AttributeValueMemberSS{Value: []string{"only"}},
				"bin":  &ddbtypes.AttributeValueMemberB{Value: []byte("bytes")},
			}),
			"empty": l(),
		}),
	}
}

// listed is an item in the table's indexes: GSI1 (INCLUDE state) and GSI2
// (KEYS_ONLY).
func listed(sk string) map[string]ddbtypes.AttributeValue {
	item := everyType("P", sk)
	item["GSI1PK"], item["GSI1SK"] = s("G"), s("g#"+sk)
	item["GSI2PK"], item["GSI2SK"] = s("D"), s(sk)
	item["state"] = s("running")
	return item
}

const otherTable = "envlease-test-other"

func typedStack(t *testing.T) (*Dynamo, *typedClients) {
	t.Helper()
	d, err := StartDynamo(t.Context(), TestTable, otherTable)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	c := newTypedClients(t, d)
	for _, it := range []struct {
		table string
		item  map[string]ddbtypes.AttributeValue
	}{
		{TestTable, everyType("P", "1")},
		{TestTable, everyType("P", "2")},
		{TestTable, map[string]ddbtypes.AttributeValue{"PK": s("P"), "SK": s("3"), "GSI1PK": s("G"), "GSI1SK": s("g"), "state": s("ready")}},
		{TestTable, map[string]ddbtypes.AttributeValue{"PK": s("Q \"odd\" <key>"), "SK": s("ü"), "v": s("odd key")}},
		{TestTable, listed("4")}, {TestTable, listed("5")}, {TestTable, listed("6")}, {TestTable, listed("7")},
		{otherTable, everyType("O", "1")},
		{otherTable, map[string]ddbtypes.AttributeValue{"PK": s("O"), "SK": s("2"), "v": &ddbtypes.AttributeValueMemberN{Value: "7"}}},
	} {
		if _, err := c.json.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(it.table), Item: it.item}); err != nil {
			t.Fatal(err)
		}
	}
	return d, c
}

// The typed reads answer what the JSON way answers: the same items, every
// attribute type, nested and empty values included, in the same order,
// missing items missing, several tables in one batch.
func TestTypedReadsAnswerAsJSON(t *testing.T) {
	_, c := typedStack(t)
	keys := func(ks ...map[string]ddbtypes.AttributeValue) []map[string]ddbtypes.AttributeValue { return ks }
	cases := []struct {
		name string
		read func(*dynamodb.Client) (any, error)
	}{
		{"get every type", getItem(TestTable, pkey("P", "1"))},
		{"get consistent", getItem(TestTable, pkey("P", "2"), func(in *dynamodb.GetItemInput) { in.ConsistentRead = aws.Bool(true) })},
		{"get no capacity", getItem(TestTable, pkey("P", "3"), func(in *dynamodb.GetItemInput) { in.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityNone })},
		{"get odd key", getItem(TestTable, pkey("Q \"odd\" <key>", "ü"))},
		{"get missing", getItem(TestTable, pkey("P", "9"))},
		{"get other table", getItem(otherTable, pkey("O", "1"))},
		{"batch in key order", batchGet(map[string]ddbtypes.KeysAndAttributes{
			TestTable: {Keys: keys(pkey("P", "3"), pkey("P", "9"), pkey("P", "1"), pkey("Q \"odd\" <key>", "ü"), pkey("P", "2"))},
		})},
		{"batch all missing", batchGet(map[string]ddbtypes.KeysAndAttributes{TestTable: {Keys: keys(pkey("X", "1"), pkey("X", "2"))}})},
		{"batch two tables", batchGet(map[string]ddbtypes.KeysAndAttributes{
			TestTable:  {Keys: keys(pkey("P", "2"), pkey("P", "1")), ConsistentRead: aws.Bool(true)},
			otherTable: {Keys: keys(pkey("O", "2"), pkey("O", "9"), pkey("O", "1"))},
		}, func(in *dynamodb.BatchGetItemInput) { in.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityNone })},
		{"batch one table found, one not", batchGet(map[string]ddbtypes.KeysAndAttributes{
			TestTable:  {Keys: keys(pkey("P", "1"))},
			otherTable: {Keys: keys(pkey("O", "9"))},
		})},
		{"query a partition", query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"), ExpressionAttributeValues: vals(":p", "P")})},
		{"query begins_with through names", query(dynamodb.QueryInput{KeyConditionExpression: aws.String("#pk = :p AND begins_with(#sk, :s)"),
			ExpressionAttributeNames: map[string]string{"#pk": "PK", "#sk": "SK"}, ExpressionAttributeValues: vals(":p", "P", ":s", "1")})},
		{"query between", query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p AND SK BETWEEN :a AND :b"),
			ExpressionAttributeValues: vals(":p", "P", ":a", "2", ":b", "5"), ConsistentRead: aws.Bool(true)})},
		{"query to a limit", query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"), ExpressionAttributeValues: vals(":p", "P"), Limit: aws.Int32(2)})},
		{"query backwards to a limit", query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p AND SK < :s"),
			ExpressionAttributeValues: vals(":p", "P", ":s", "6"), Limit: aws.Int32(3), ScanIndexForward: aws.Bool(false)})},
		{"query after a start key", query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"), ExpressionAttributeValues: vals(":p", "P"),
			ExclusiveStartKey: pkey("P", "2"), Limit: aws.Int32(3)})},
		{"query an INCLUDE index", query(dynamodb.QueryInput{IndexName: aws.String(store.IndexGSI1), KeyConditionExpression: aws.String("GSI1PK = :g"),
			ExpressionAttributeValues: vals(":g", "G"), Limit: aws.Int32(2)})},
		{"query a KEYS_ONLY index backwards", query(dynamodb.QueryInput{IndexName: aws.String(store.IndexGSI2), KeyConditionExpression: aws.String("GSI2PK = :d"),
			ExpressionAttributeValues: vals(":d", "D"), ScanIndexForward: aws.Bool(false)})},
		{"query an index after a start key", query(dynamodb.QueryInput{IndexName: aws.String(store.IndexGSI1), KeyConditionExpression: aws.String("GSI1PK = :g"),
			ExpressionAttributeValues: vals(":g", "G"), ExclusiveStartKey: vals("PK", "P", "SK", "5", "GSI1PK", "G", "GSI1SK", "g#5")})},
		{"query no items", query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"), ExpressionAttributeValues: vals(":p", "none")})},
		{"query another table", query(dynamodb.QueryInput{TableName: aws.String(otherTable), KeyConditionExpression: aws.String("PK = :p"),
			ExpressionAttributeValues: vals(":p", "O"), ReturnConsumedCapacity: ddbtypes.ReturnConsumedCapacityNone})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, typed := c.call(t, tc.read); !typed {
				t.Error("went the JSON way; want it answered typed")
			}
		})
	}
}

// The reads the front does not answer itself go the JSON way, to the front
// and minidyn, and get the same answer or the same DynamoDB error as
// before.
func TestTypedReadsLeaveTheRestToJSON(t *testing.T) {
	d, c := typedStack(t)
	hundredAndOne := make([]map[string]ddbtypes.AttributeValue, 101)
	for i := range hundredAndOne {
		hundredAndOne[i] = pkey("P", fmt.Sprint("k", i))
	}
	cases := []struct {
		name    string
		read    func(*dynamodb.Client) (any, error)
		errCode string // "" when it is answered
		setup   func(t *testing.T)
	}{
		{name: "duplicate key in a batch", errCode: "ValidationException", read: batchGet(map[string]ddbtypes.KeysAndAttributes{
			TestTable: {Keys: []map[string]ddbtypes.AttributeValue{pkey("P", "1"), pkey("P", "2"), pkey("P", "1")}}})},
		{name: "more than 100 keys", errCode: "ValidationException", read: batchGet(map[string]ddbtypes.KeysAndAttributes{TestTable: {Keys: hundredAndOne}})},
		{name: "projection", read: getItem(TestTable, pkey("P", "1"), func(in *dynamodb.GetItemInput) { in.ProjectionExpression = aws.String("plain, #m.nested") }, func(in *dynamodb.GetItemInput) {
			in.ExpressionAttributeNames = map[string]string{"#m": "map"}
		})},
		{name: "attributes to get", read: getItem(TestTable, pkey("P", "1"), func(in *dynamodb.GetItemInput) { in.AttributesToGet = []string{"plain", "int"} })},
		{name: "batch projection", read: batchGet(map[string]ddbtypes.KeysAndAttributes{
			TestTable: {Keys: []map[string]ddbtypes.AttributeValue{pkey("P", "1")}, ProjectionExpression: aws.String("PK, plain")}})},
		{name: "consumed capacity", read: getItem(TestTable, pkey("P", "1"), func(in *dynamodb.GetItemInput) {
			in.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
		})},
		{name: "number for a string key", errCode: "ValidationException", read: getItem(TestTable, map[string]ddbtypes.AttributeValue{
			"PK": &ddbtypes.AttributeValueMemberN{Value: "1"}, "SK": s("1")})},
		{name: "a key attribute missing", errCode: "ValidationException", read: getItem(TestTable, map[string]ddbtypes.AttributeValue{"PK": s("P")})},
		{name: "an attribute beside the key", errCode: "ValidationException", read: getItem(TestTable, map[string]ddbtypes.AttributeValue{
			"PK": s("P"), "SK": s("1"), "plain": s("running")})},
		// DynamoDB refuses it; minidyn answers it, as it did before.
		{name: "empty string key", read: getItem(TestTable, pkey("", "1"))},
		{name: "batch wrong key type", errCode: "ValidationException", read: batchGet(map[string]ddbtypes.KeysAndAttributes{
			TestTable: {Keys: []map[string]ddbtypes.AttributeValue{pkey("P", "1"), {"PK": s("P"), "SK": &ddbtypes.AttributeValueMemberB{Value: []byte("1")}}}}})},
		{name: "missing table", errCode: "ResourceNotFoundException", read: getItem("no-such-table", pkey("P", "1"))},
		{name: "batch with a missing table", errCode: "ResourceNotFoundException", read: batchGet(map[string]ddbtypes.KeysAndAttributes{
			TestTable: {Keys: []map[string]ddbtypes.AttributeValue{pkey("P", "1")}}, "no-such-table": {Keys: []map[string]ddbtypes.AttributeValue{pkey("P", "1")}}})},
		{name: "query with a filter", read: query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"), FilterExpression: aws.String("plain = :r"),
			ExpressionAttributeValues: vals(":p", "P", ":r", "running")})},
		{name: "query with a projection", read: query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"), ProjectionExpression: aws.String("SK, plain"),
			ExpressionAttributeValues: vals(":p", "P")})},
		{name: "query counting", read: query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"), Select: ddbtypes.SelectCount,
			ExpressionAttributeValues: vals(":p", "P")})},
		{name: "query with consumed capacity", read: query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"),
			ExpressionAttributeValues: vals(":p", "P"), ReturnConsumedCapacity: ddbtypes.ReturnConsumedCapacityTotal})},
		{name: "query with an unused value", errCode: "ValidationException", read: query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"),
			ExpressionAttributeValues: vals(":p", "P", ":unused", "x")})},
		{name: "query with a number for a string key", read: query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": &ddbtypes.AttributeValueMemberN{Value: "1"}}})},
		{name: "query a key condition the front does not read", read: query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p AND SK <> :s"),
			ExpressionAttributeValues: vals(":p", "P", ":s", "1")})},
		{name: "query from a start key of another partition", read: query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"),
			ExpressionAttributeValues: vals(":p", "P"), ExclusiveStartKey: pkey("Q", "1")})},
		{name: "consistent query of a global index", read: query(dynamodb.QueryInput{IndexName: aws.String(store.IndexGSI1),
			KeyConditionExpression: aws.String("GSI1PK = :g"), ExpressionAttributeValues: vals(":g", "G"), ConsistentRead: aws.Bool(true)})},
		{name: "query with a limit of 0", read: query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"),
			ExpressionAttributeValues: vals(":p", "P"), Limit: aws.Int32(0)})},
		{name: "query while a failure is emulated", errCode: "InternalServerError", read: query(dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"),
			ExpressionAttributeValues: vals(":p", "P")}), setup: func(t *testing.T) {
			d.Server.EmulateFailure(server.FailureConditionInternalServerError)
			t.Cleanup(func() { d.Server.EmulateFailure(server.FailureConditionNone) })
		}},
		{name: "failure emulated", errCode: "InternalServerError", read: getItem(TestTable, pkey("P", "1")), setup: func(t *testing.T) {
			d.Server.EmulateFailure(server.FailureConditionInternalServerError)
			t.Cleanup(func() { d.Server.EmulateFailure(server.FailureConditionNone) })
		}},
		{name: "batch while its table's failure is emulated", errCode: "InternalServerError", read: batchGet(map[string]ddbtypes.KeysAndAttributes{
			otherTable: {Keys: []map[string]ddbtypes.AttributeValue{pkey("O", "1")}}}), setup: func(t *testing.T) {
			d.Server.EmulateFailureForTable(otherTable, server.FailureConditionInternalServerError)
			t.Cleanup(func() { d.Server.EmulateFailureForTable(otherTable, server.FailureConditionNone) })
		}},
		// Any emulation on sends every read to minidyn, which fails only
		// the emulated table's.
		{name: "batch while another table's failure is emulated", read: batchGet(map[string]ddbtypes.KeysAndAttributes{
			otherTable: {Keys: []map[string]ddbtypes.AttributeValue{pkey("O", "1")}}}), setup: func(t *testing.T) {
			d.Server.EmulateFailureForTable(TestTable, server.FailureConditionInternalServerError)
			t.Cleanup(func() { d.Server.EmulateFailureForTable(TestTable, server.FailureConditionNone) })
		}},
		{name: "batch while unprocessed items are emulated", read: batchGet(map[string]ddbtypes.KeysAndAttributes{
			TestTable: {Keys: []map[string]ddbtypes.AttributeValue{pkey("P", "1"), pkey("P", "2")}}}), setup: func(t *testing.T) {
			d.Server.EmulateUnprocessedItems(TestTable, func(n int, _ map[string]*server.AttributeValue) bool { return n == 1 })
			t.Cleanup(d.Server.ClearUnprocessedItems)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup(t)
			}
			before := c.trips.Load()
			_, typed := c.call(t, tc.read)
			if typed {
				t.Error("answered typed; want it left to the JSON way")
			}
			if c.trips.Load() == before {
				t.Error("no JSON round trip")
			}
			if tc.errCode == "" {
				return
			}
			var api smithy.APIError
			if _, err := tc.read(c.typed); !errors.As(err, &api) || api.ErrorCode() != tc.errCode {
				t.Errorf("got %v, want %s", err, tc.errCode)
			}
		})
	}
}

// What a read gives is the caller's: changing it changes nothing the next
// read answers.
func TestTypedReadsGiveTheCallerItsOwnItems(t *testing.T) {
	_, c := typedStack(t)
	ctx := t.Context()
	want := everyType("P", "1")
	mutate := func(item map[string]ddbtypes.AttributeValue) {
		item["plain"].(*ddbtypes.AttributeValueMemberS).Value = "changed"
		item["binary"].(*ddbtypes.AttributeValueMemberB).Value[0] = 99
		item["strings"].(*ddbtypes.AttributeValueMemberSS).Value[0] = "changed"
		item["binaries"].(*ddbtypes.AttributeValueMemberBS).Value[1][0] = 99
		nested := item["map"].(*ddbtypes.AttributeValueMemberM).Value["nested"].(*ddbtypes.AttributeValueMemberM).Value
		nested["added"] = s("x")
		delete(nested, "set")
		list := item["list"].(*ddbtypes.AttributeValueMemberL)
		list.Value[0] = s("replaced")
		list.Value[2].(*ddbtypes.AttributeValueMemberL).Value = append(list.Value[2].(*ddbtypes.AttributeValueMemberL).Value, s("grown"))
		item["emptyM"].(*ddbtypes.AttributeValueMemberM).Value["k"] = s("v")
		delete(item, "int")
		item["new"] = s("new")
	}
	cases := []struct {
		name string
		read func() (map[string]ddbtypes.AttributeValue, error)
	}{
		{"GetItem", func() (map[string]ddbtypes.AttributeValue, error) {
			out, err := c.typed.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(TestTable), Key: pkey("P", "1")})
			if err != nil {
				return nil, err
			}
			return out.Item, nil
		}},
		{"BatchGetItem", func() (map[string]ddbtypes.AttributeValue, error) {
			out, err := c.typed.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]ddbtypes.KeysAndAttributes{
				TestTable: {Keys: []map[string]ddbtypes.AttributeValue{pkey("P", "1")}}}})
			if err != nil || len(out.Responses[TestTable]) != 1 {
				return nil, fmt.Errorf("%v: %v", out, err)
			}
			return out.Responses[TestTable][0], nil
		}},
		{"Query", func() (map[string]ddbtypes.AttributeValue, error) {
			out, err := c.typed.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(TestTable), KeyConditionExpression: aws.String("PK = :p AND SK = :s"),
				ExpressionAttributeValues: vals(":p", "P", ":s", "1")})
			if err != nil || len(out.Items) != 1 {
				return nil, fmt.Errorf("%v: %v", out, err)
			}
			return out.Items[0], nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			first, err := tc.read()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(first, want) {
				t.Fatalf("read %s, want %s", render(first), render(want))
			}
			mutate(first)
			again, err := tc.read()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(again, want) {
				t.Errorf("after the caller changed its copy, read %s, want %s", render(again), render(want))
			}
		})
	}
}

// Every call answered typed is still seen by the Initialize step: the call
// counters count it and see the items it returned.
func TestTypedReadsAreCounted(t *testing.T) {
	_, c := typedStack(t)
	ctx := t.Context()
	counter := store.NewCallCounter()
	var results []any
	db := dynamodb.New(c.typed.Options(), counter.Option, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("testResults",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					out, md, err := next.HandleInitialize(ctx, in)
					results = append(results, out.Result)
					return out, md, err
				}), middleware.After)
		})
	})
	before := c.trips.Load()
	if _, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(TestTable), Key: pkey("P", "3")}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]ddbtypes.KeysAndAttributes{
			TestTable: {Keys: []map[string]ddbtypes.AttributeValue{pkey("P", "1"), pkey("P", "3")}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(TestTable), KeyConditionExpression: aws.String("PK = :p"),
		ExpressionAttributeValues: vals(":p", "P")}); err != nil {
		t.Fatal(err)
	}
	if c.trips.Load() != before {
		t.Fatalf("%d JSON round trips; want the reads answered typed", c.trips.Load()-before)
	}
	if got, want := counter.Counts(), map[string]int{"GetItem": 1, "BatchGetItem": 2, "Query": 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("counted %v, want %v", got, want)
	}
	if len(results) != 4 {
		t.Fatalf("the Initialize step saw %d results, want 4", len(results))
	}
	if g, _ := results[0].(*dynamodb.GetItemOutput); g == nil || g.Item["state"].(*ddbtypes.AttributeValueMemberS).Value != "ready" {
		t.Errorf("the Initialize step saw %s", render(results[0]))
	}
	if b, _ := results[2].(*dynamodb.BatchGetItemOutput); b == nil || len(b.Responses[TestTable]) != 2 {
		t.Errorf("the Initialize step saw %s", render(results[2]))
	}
}

// Typed reads decode items after letting go of the front's lock, while
// writes replace them: every read sees one whole version of an item (run
// with -race, it also shows nothing is shared with the writes).
func TestTypedReadsBesideWrites(t *testing.T) {
	_, c := typedStack(t)
	ctx := t.Context()
	version := func(n int) map[string]ddbtypes.AttributeValue {
		v := fmt.Sprint(n)
		return map[string]ddbtypes.AttributeValue{"PK": s("W"), "SK": s("1"), "a": s(v), "b": &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{"a": s(v)}}}
	}
	whole := func(item map[string]ddbtypes.AttributeValue) bool {
		a, _ := item["a"].(*ddbtypes.AttributeValueMemberS)
		b, _ := item["b"].(*ddbtypes.AttributeValueMemberM)
		if a == nil || b == nil {
			return false
		}
		ba, _ := b.Value["a"].(*ddbtypes.AttributeValueMemberS)
		return ba != nil && ba.Value == a.Value
	}
	if _, err := c.typed.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(TestTable), Item: version(0)}); err != nil {
		t.Fatal(err)
	}
	const rounds = 200
	errs := make(chan error, 4)
	go func() {
		for n := 1; n <= rounds; n++ {
			if _, err := c.typed.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(TestTable), Item: version(n)}); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	reads := []func() ([]map[string]ddbtypes.AttributeValue, error){
		func() ([]map[string]ddbtypes.AttributeValue, error) {
			out, err := c.typed.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(TestTable), Key: pkey("W", "1")})
			if err != nil {
				return nil, err
			}
			return []map[string]ddbtypes.AttributeValue{out.Item}, nil
		},
		func() ([]map[string]ddbtypes.AttributeValue, error) {
			out, err := c.typed.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]ddbtypes.KeysAndAttributes{
				TestTable: {Keys: []map[string]ddbtypes.AttributeValue{pkey("W", "1")}}}})
			if err != nil {
				return nil, err
			}
			return out.Responses[TestTable], nil
		},
		func() ([]map[string]ddbtypes.AttributeValue, error) {
			out, err := c.typed.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(TestTable), KeyConditionExpression: aws.String("PK = :p"),
				ExpressionAttributeValues: vals(":p", "W")})
			if err != nil {
				return nil, err
			}
			return out.Items, nil
		},
	}
	for _, read := range reads {
		go func() {
			for range rounds {
				items, err := read()
				if err == nil && (len(items) != 1 || !whole(items[0])) {
					err = fmt.Errorf("read %s, want one whole version of the item", render(items))
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 1 + len(reads) {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
