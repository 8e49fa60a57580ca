package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/store"
)

// forEachDynamo runs f against minidyn (behind its front) and DynamoDB
// Local, or the one ENVLEASE_TEST_DYNAMO names: the front must answer as
// DynamoDB does, so every case expects DynamoDB's answer of both.
func forEachDynamo(t *testing.T, f func(t *testing.T, d *Dynamo)) {
	for _, kind := range []string{KindMinidyn, KindDynamoLocal} {
		if v := os.Getenv(TestDynamoEnv); v != "" && v != "both" && v != kind {
			continue
		}
		t.Run(kind, func(t *testing.T) {
			ctx := t.Context()
			var d *Dynamo
			var err error
			if kind == KindMinidyn {
				d, err = StartDynamo(ctx, TestTable)
			} else {
				var l *DynamoLocal
				if l, err = sharedLocal.get(ctx); err == nil {
					d, err = l.Namespace(ctx, TestTable)
				}
			}
			if err != nil {
				t.Fatalf("start %s: %v", kind, err)
			}
			t.Cleanup(d.Close)
			f(t, d)
		})
	}
}

func s(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }

// frontSeed is a partition P of nine items, one item of partition Q, and
// a GSI1 partition G of five of P's items.
func frontSeed(t *testing.T, ctx context.Context, db *dynamodb.Client) {
	t.Helper()
	sks := []string{"A#1", "A#2", "A#3", "A#4", "A#5", "B#1", "B#2", "B#3", "C"}
	put := func(item map[string]ddbtypes.AttributeValue) {
		t.Helper()
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(TestTable), Item: item}); err != nil {
			t.Fatalf("put: %v", err)
		}
	}
	for i, sk := range sks {
		item := map[string]ddbtypes.AttributeValue{"PK": s("P"), "SK": s(sk), "n": &ddbtypes.AttributeValueMemberN{Value: fmt.Sprint(i % 2)}}
		if i < 5 {
			item["GSI1PK"], item["GSI1SK"] = s("G"), s(fmt.Sprintf("g%d", 5-i))
		}
		put(item)
	}
	put(map[string]ddbtypes.AttributeValue{"PK": s("Q"), "SK": s("A#1"), "GSI1PK": s("G"), "GSI1SK": s("g9")})
}

// pages runs a query to its end, returning each page's sort keys (the
// table's SK) with a trailing empty page left out.
func pages(t *testing.T, ctx context.Context, db *dynamodb.Client, in dynamodb.QueryInput) [][]string {
	t.Helper()
	in.TableName = aws.String(TestTable)
	var out [][]string
	for range 20 {
		page, err := db.Query(ctx, &in)
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		var sks []string
		for _, it := range page.Items {
			sks = append(sks, it["PK"].(*ddbtypes.AttributeValueMemberS).Value+"/"+it["SK"].(*ddbtypes.AttributeValueMemberS).Value)
		}
		if len(sks) > 0 {
			out = append(out, sks)
		}
		if page.LastEvaluatedKey == nil {
			return out
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
	t.Fatal("query did not end in 20 pages")
	return nil
}

func TestFrontQueriesReadTheirRange(t *testing.T) {
	vals := func(kv ...string) map[string]ddbtypes.AttributeValue {
		m := map[string]ddbtypes.AttributeValue{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = s(kv[i+1])
		}
		return m
	}
	cases := []struct {
		name string
		in   dynamodb.QueryInput
		want [][]string
	}{
		{"partition", dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"), ExpressionAttributeValues: vals(":p", "P")},
			[][]string{{"P/A#1", "P/A#2", "P/A#3", "P/A#4", "P/A#5", "P/B#1", "P/B#2", "P/B#3", "P/C"}}},
		{"begins_with", dynamodb.QueryInput{KeyConditionExpression: aws.String("#pk = :p AND begins_with(#sk, :b)"),
			ExpressionAttributeNames: map[string]string{"#pk": "PK", "#sk": "SK"}, ExpressionAttributeValues: vals(":p", "P", ":b", "B#")},
			[][]string{{"P/B#1", "P/B#2", "P/B#3"}}},
		{"between", dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p AND SK BETWEEN :a AND :b"), ExpressionAttributeValues: vals(":p", "P", ":a", "A#4", ":b", "B#2")},
			[][]string{{"P/A#4", "P/A#5", "P/B#1", "P/B#2"}}},
		{"greater", dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p AND SK > :a"), ExpressionAttributeValues: vals(":p", "P", ":a", "B#2")},
			[][]string{{"P/B#3", "P/C"}}},
		{"at most", dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p AND SK <= :a"), ExpressionAttributeValues: vals(":p", "P", ":a", "A#2")},
			[][]string{{"P/A#1", "P/A#2"}}},
		{"less, backwards", dynamodb.QueryInput{KeyConditionExpression: aws.String("(SK < :a) AND (PK = :p)"), ExpressionAttributeValues: vals(":p", "P", ":a", "A#3"),
			ScanIndexForward: aws.Bool(false)},
			[][]string{{"P/A#2", "P/A#1"}}},
		{"pages backwards", dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p AND begins_with(SK, :b)"), ExpressionAttributeValues: vals(":p", "P", ":b", "A#"),
			ScanIndexForward: aws.Bool(false), Limit: aws.Int32(2)},
			[][]string{{"P/A#5", "P/A#4"}, {"P/A#3", "P/A#2"}, {"P/A#1"}}},
		{"index pages", dynamodb.QueryInput{IndexName: aws.String(store.IndexGSI1), KeyConditionExpression: aws.String("GSI1PK = :g"), ExpressionAttributeValues: vals(":g", "G"),
			Limit: aws.Int32(2)},
			[][]string{{"P/A#5", "P/A#4"}, {"P/A#3", "P/A#2"}, {"P/A#1", "Q/A#1"}}},
		{"index range backwards", dynamodb.QueryInput{IndexName: aws.String(store.IndexGSI1), KeyConditionExpression: aws.String("GSI1PK = :g AND GSI1SK >= :s"),
			ExpressionAttributeValues: vals(":g", "G", ":s", "g4"), ScanIndexForward: aws.Bool(false), Limit: aws.Int32(2)},
			[][]string{{"Q/A#1", "P/A#1"}, {"P/A#2"}}},
		// Limit bounds the items read, before the filter: the first page
		// reads A#1..A#3 and keeps the two with n = 0.
		{"filter within limit", dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"), FilterExpression: aws.String("n = :zero"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": s("P"), ":zero": &ddbtypes.AttributeValueMemberN{Value: "0"}}, Limit: aws.Int32(3)},
			[][]string{{"P/A#1", "P/A#3"}, {"P/A#5"}, {"P/B#2", "P/C"}}},
	}
	forEachDynamo(t, func(t *testing.T, d *Dynamo) {
		ctx := t.Context()
		db := d.Client(ctx)
		frontSeed(t, ctx, db)
		for _, c := range cases {
			got := pages(t, ctx, db, c.in)
			// GSI1 projects keys and state only: the listed keys are the check.
			if !slices.EqualFunc(got, c.want, slices.Equal) {
				t.Errorf("%s: pages %v, want %v", c.name, got, c.want)
			}
		}
	})
}

// A cancelled transaction leaves every item as it was; an item rewritten
// without its index keys leaves the index; a batch's deletes are kept.
func TestFrontKeepsWhatMinidynWrote(t *testing.T) {
	forEachDynamo(t, func(t *testing.T, d *Dynamo) {
		ctx := t.Context()
		db := d.Client(ctx)
		frontSeed(t, ctx, db)
		table := aws.String(TestTable)
		_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
			{Put: &ddbtypes.Put{TableName: table, Item: map[string]ddbtypes.AttributeValue{"PK": s("P"), "SK": s("D")}}},
			{Update: &ddbtypes.Update{TableName: table, Key: map[string]ddbtypes.AttributeValue{"PK": s("P"), "SK": s("C")},
				UpdateExpression: aws.String("SET n = :one"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "7"}}}},
			{ConditionCheck: &ddbtypes.ConditionCheck{TableName: table, Key: map[string]ddbtypes.AttributeValue{"PK": s("Q"), "SK": s("A#1")},
				ConditionExpression: aws.String("attribute_not_exists(PK)")}},
		}})
		var cancelled *ddbtypes.TransactionCanceledException
		if !errors.As(err, &cancelled) || len(cancelled.CancellationReasons) != 3 || aws.ToString(cancelled.CancellationReasons[2].Code) != "ConditionalCheckFailed" {
			t.Fatalf("transaction: %v, want cancelled on its third item", err)
		}
		got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: map[string]ddbtypes.AttributeValue{"PK": s("P"), "SK": s("C")}, ConsistentRead: aws.Bool(true)})
		if err != nil || got.Item["n"].(*ddbtypes.AttributeValueMemberN).Value != "0" {
			t.Fatalf("C after the cancelled transaction: %v %v", got.Item, err)
		}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: map[string]ddbtypes.AttributeValue{"PK": s("P"), "SK": s("A#5")}}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddbtypes.WriteRequest{TestTable: {
			{DeleteRequest: &ddbtypes.DeleteRequest{Key: map[string]ddbtypes.AttributeValue{"PK": s("Q"), "SK": s("A#1")}}},
			{PutRequest: &ddbtypes.PutRequest{Item: map[string]ddbtypes.AttributeValue{"PK": s("P"), "SK": s("E"), "GSI1PK": s("G"), "GSI1SK": s("g0")}}},
		}}}); err != nil {
			t.Fatal(err)
		}
		index := pages(t, ctx, db, dynamodb.QueryInput{IndexName: aws.String(store.IndexGSI1), KeyConditionExpression: aws.String("GSI1PK = :g"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":g": s("G")}})
		if want := [][]string{{"P/E", "P/A#4", "P/A#3", "P/A#2", "P/A#1"}}; !slices.EqualFunc(index, want, slices.Equal) {
			t.Errorf("GSI1 after the writes: %v, want %v", index, want)
		}
		part := pages(t, ctx, db, dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p AND SK > :c"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": s("P"), ":c": s("B#3")}})
		if want := [][]string{{"P/C", "P/E"}}; !slices.EqualFunc(part, want, slices.Equal) {
			t.Errorf("P after the writes: %v, want %v", part, want)
		}
	})
}

func TestParseKeyCondition(t *testing.T) {
	vals := map[string]json.RawMessage{":p": json.RawMessage(`{"S":"P"}`), ":a": json.RawMessage(`{"S":"a"}`), ":b": json.RawMessage(`{"S":"b"}`), ":n": json.RawMessage(`{"N":"3"}`)}
	names := map[string]string{"#s": "SK"}
	ks := keySchema{hashAttr: "PK", rangeAttr: "SK"}
	cases := []struct {
		expr   string
		ok     bool
		lower  string
		upper  string
		prefix string
	}{
		{"PK = :p", true, "", "", ""},
		{"PK=:p AND #s BETWEEN :a AND :b", true, "a", "b", ""},
		{"begins_with(SK, :a) AND PK = :p", true, "", "", "a"},
		{"PK = :p AND SK >= :a", true, "a", "", ""},
		{"PK = :p AND begins_with(SK, :n)", false, "", "", ""},
		{"PK = :p OR SK = :a", false, "", "", ""},
		{"PK = :p AND SK = :a AND SK = :b", false, "", "", ""},
		{"SK = :a", false, "", "", ""},
		{"PK = :missing", false, "", "", ""},
		{"PK <> :p", false, "", "", ""},
	}
	for _, c := range cases {
		kc, ok := parseKeyCondition(c.expr, names, vals, ks)
		if ok != c.ok {
			t.Errorf("%q: ok %v, want %v", c.expr, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		if kc.hash.s != "P" || (c.lower != "" && kc.rng.lower.s != c.lower) || (c.upper != "" && kc.rng.upper.s != c.upper) ||
			(c.prefix != "" && (kc.rng.prefix == nil || kc.rng.prefix.s != c.prefix)) {
			t.Errorf("%q: parsed %+v", c.expr, kc)
		}
	}
}

// The sweep deletes what DynamoDB's TTL would: a Number of epoch seconds at
// or before now, not more than five years back; everything else stays.
func TestFrontExpiresAsTTLDoes(t *testing.T) {
	ctx := t.Context()
	d, err := StartDynamo(ctx, TestTable)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	db := d.Client(ctx)
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	n := func(t time.Time) ddbtypes.AttributeValue {
		return &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(t.Unix(), 10)}
	}
	items := []struct {
		sk   string
		ttl  ddbtypes.AttributeValue
		kept bool
	}{
		{"past", n(now.Add(-time.Second)), false},
		{"now", n(now), false},
		{"future", n(now.Add(time.Second)), true},
		{"none", nil, true},
		{"ancient", n(now.Add(-6 * 365 * 24 * time.Hour)), true},
		{"string", s(strconv.FormatInt(now.Add(-time.Hour).Unix(), 10)), true},
	}
	for _, it := range items {
		item := map[string]ddbtypes.AttributeValue{"PK": s("P"), "SK": s(it.sk), "GSI1PK": s("G"), "GSI1SK": s(it.sk)}
		if it.ttl != nil {
			item[store.AttrTTL] = it.ttl
		}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(TestTable), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	if got := d.front.expire(store.AttrTTL, now); got != 2 {
		t.Errorf("expired %d items, want 2", got)
	}
	var want []string
	for _, it := range items {
		if it.kept {
			want = append(want, "P/"+it.sk)
		}
	}
	slices.Sort(want)
	for _, index := range []string{"", store.IndexGSI1} {
		in := dynamodb.QueryInput{KeyConditionExpression: aws.String("PK = :p"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": s("P")}}
		if index != "" {
			in = dynamodb.QueryInput{IndexName: aws.String(index), KeyConditionExpression: aws.String("GSI1PK = :g"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":g": s("G")}}
		}
		got := pages(t, ctx, db, in)
		if len(got) != 1 || !slices.Equal(got[0], want) {
			t.Errorf("index %q after the sweep: %v, want %v", index, got, want)
		}
	}
}

// Items that tie on an index's key are paged once each: the page's last
// key is the front's last item, in the order the next page is read in
// (minidyn orders ties by another rule, "PK.SK" as one string, under which
// "X-" comes before "X").
func TestFrontPagesTiesOnce(t *testing.T) {
	forEachDynamo(t, func(t *testing.T, d *Dynamo) {
		ctx := t.Context()
		db := d.Client(ctx)
		for _, pk := range []string{"X", "X-", "X+", "X#"} {
			item := map[string]ddbtypes.AttributeValue{"PK": s(pk), "SK": s("Z"), "GSI1PK": s("T"), "GSI1SK": s("tie")}
			if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(TestTable), Item: item}); err != nil {
				t.Fatal(err)
			}
		}
		got := pages(t, ctx, db, dynamodb.QueryInput{IndexName: aws.String(store.IndexGSI1),
			KeyConditionExpression:    aws.String("GSI1PK = :g"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":g": s("T")}, Limit: aws.Int32(1)})
		seen := map[string]int{}
		for _, p := range got {
			for _, k := range p {
				seen[k]++
			}
		}
		if len(seen) != 4 {
			t.Errorf("pages %v: %d items, want the 4 that tie", got, len(seen))
		}
		for k, n := range seen {
			if n != 1 {
				t.Errorf("%s read %d times over pages %v", k, n, got)
			}
		}
	})
}
