package devstack

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/envlease/envlease/shared/store"
)

// The reads the front answers itself answer as DynamoDB does: whole items
// by key, an index's items as it projects them, nothing for a missing key;
// and the reads DynamoDB refuses are refused (minidyn judges those).
func TestFrontAnswersReadsAsDynamoDB(t *testing.T) {
	key := func(pk, sk string) map[string]ddbtypes.AttributeValue {
		return map[string]ddbtypes.AttributeValue{"PK": s(pk), "SK": s(sk)}
	}
	forEachDynamo(t, func(t *testing.T, d *Dynamo) {
		ctx := t.Context()
		db := d.Client(ctx)
		frontSeed(t, ctx, db)
		table := aws.String(TestTable)
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: map[string]ddbtypes.AttributeValue{
			"PK": s("R"), "SK": s("1"), "GSI1PK": s("H"), "GSI1SK": s("h"), "state": s("running"), "other": s("x"),
			"empty": &ddbtypes.AttributeValueMemberL{Value: []ddbtypes.AttributeValue{}},
		}}); err != nil {
			t.Fatal(err)
		}

		got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: key("R", "1"), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if names := slices.Sorted(maps.Keys(got.Item)); !slices.Equal(names, []string{"GSI1PK", "GSI1SK", "PK", "SK", "empty", "other", "state"}) {
			t.Errorf("GetItem: attributes %v", names)
		}
		if l, ok := got.Item["empty"].(*ddbtypes.AttributeValueMemberL); !ok || len(l.Value) != 0 {
			t.Errorf("GetItem: empty list read back as %#v", got.Item["empty"])
		}
		if got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: key("R", "2")}); err != nil || got.Item != nil {
			t.Errorf("GetItem of no item: %v %v", got.Item, err)
		}

		batch, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]ddbtypes.KeysAndAttributes{
			TestTable: {Keys: []map[string]ddbtypes.AttributeValue{key("P", "A#1"), key("R", "1"), key("R", "9")}, ConsistentRead: aws.Bool(true)},
		}})
		if err != nil {
			t.Fatal(err)
		}
		var sks []string
		for _, it := range batch.Responses[TestTable] {
			sks = append(sks, it["PK"].(*ddbtypes.AttributeValueMemberS).Value+"/"+it["SK"].(*ddbtypes.AttributeValueMemberS).Value)
		}
		if slices.Sort(sks); !slices.Equal(sks, []string{"P/A#1", "R/1"}) || len(batch.UnprocessedKeys) != 0 {
			t.Errorf("BatchGetItem: %v, unprocessed %v", sks, batch.UnprocessedKeys)
		}

		// GSI1 projects its keys, the table's and state.
		q, err := db.Query(ctx, &dynamodb.QueryInput{TableName: table, IndexName: aws.String(store.IndexGSI1),
			KeyConditionExpression: aws.String("GSI1PK = :h"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":h": s("H")}})
		if err != nil {
			t.Fatal(err)
		}
		if len(q.Items) != 1 || q.Count != 1 || q.ScannedCount != 1 {
			t.Fatalf("GSI1 query: %d items, count %d/%d", len(q.Items), q.Count, q.ScannedCount)
		}
		if names := slices.Sorted(maps.Keys(q.Items[0])); !slices.Equal(names, []string{"GSI1PK", "GSI1SK", "PK", "SK", "state"}) {
			t.Errorf("GSI1 query: attributes %v, want the projected ones", names)
		}
		q, err = db.Query(ctx, &dynamodb.QueryInput{TableName: table, KeyConditionExpression: aws.String("PK = :p"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": s("P")}, Limit: aws.Int32(9), ConsistentRead: aws.Bool(true)})
		if err != nil || len(q.Items) != 9 || q.LastEvaluatedKey == nil {
			t.Errorf("query of 9 with Limit 9: %d items, last key %v, %v (DynamoDB gives a start key once Limit items were read)", len(q.Items), q.LastEvaluatedKey, err)
		}

		refused := []struct {
			name string
			call func() error
		}{
			{"key without its sort key", func() error {
				_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: map[string]ddbtypes.AttributeValue{"PK": s("R")}})
				return err
			}},
			{"key with another attribute", func() error {
				k := key("R", "1")
				k["other"] = s("x")
				_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: k})
				return err
			}},
			{"key of another type", func() error {
				_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: map[string]ddbtypes.AttributeValue{"PK": s("R"), "SK": &ddbtypes.AttributeValueMemberN{Value: "1"}}})
				return err
			}},
			{"batch naming a key twice", func() error {
				_, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]ddbtypes.KeysAndAttributes{
					TestTable: {Keys: []map[string]ddbtypes.AttributeValue{key("R", "1"), key("R", "1")}}}})
				return err
			}},
			{"query with an unused value", func() error {
				_, err := db.Query(ctx, &dynamodb.QueryInput{TableName: table, KeyConditionExpression: aws.String("PK = :p"),
					ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": s("P"), ":unused": s("x")}})
				return err
			}},
			{"query of an index the table lacks", func() error {
				_, err := db.Query(ctx, &dynamodb.QueryInput{TableName: table, IndexName: aws.String("NoSuchIndex"),
					KeyConditionExpression: aws.String("PK = :p"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": s("P")}})
				return err
			}},
		}
		for _, r := range refused {
			var api smithy.APIError
			if err := r.call(); !errors.As(err, &api) || api.ErrorCode() != "ValidationException" {
				t.Errorf("%s: %v, want a ValidationException", r.name, err)
			}
		}
	})
}

// The plain reads of the store are answered by the front itself, not
// handed to minidyn; the others and every read while a failure is
// emulated go to minidyn.
func TestFrontAnswersPlainReadsItself(t *testing.T) {
	ctx := t.Context()
	d, err := StartDynamo(ctx, TestTable)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cases := []struct {
		op, body string
		fast     bool
	}{
		{"GetItem", `{"TableName":"` + TestTable + `","Key":{"PK":{"S":"a"},"SK":{"S":"b"}},"ConsistentRead":true}`, true},
		{"GetItem", `{"TableName":"` + TestTable + `","Key":{"PK":{"S":"a"},"SK":{"S":"b"}},"ProjectionExpression":"PK"}`, false},
		{"GetItem", `{"TableName":"` + TestTable + `","Key":{"PK":{"S":""},"SK":{"S":"b"}}}`, false},
		{"GetItem", `{"TableName":"nope","Key":{"PK":{"S":"a"},"SK":{"S":"b"}}}`, false},
		{"BatchGetItem", `{"RequestItems":{"` + TestTable + `":{"Keys":[{"PK":{"S":"a"},"SK":{"S":"b"}},{"PK":{"S":"a"},"SK":{"S":"c"}}],"ConsistentRead":true}}}`, true},
		{"Query", `{"TableName":"` + TestTable + `","KeyConditionExpression":"PK = :p AND begins_with(SK, :s)","ExpressionAttributeValues":{":p":{"S":"a"},":s":{"S":"b"}},"Limit":5}`, true},
		{"Query", `{"TableName":"` + TestTable + `","IndexName":"GSI3","KeyConditionExpression":"GSI3PK = :p","ExpressionAttributeValues":{":p":{"S":"a"}}}`, true},
		{"Query", `{"TableName":"` + TestTable + `","IndexName":"GSI3","KeyConditionExpression":"GSI3PK = :p","ExpressionAttributeValues":{":p":{"S":"a"}},"ConsistentRead":true}`, false},
		{"Query", `{"TableName":"` + TestTable + `","KeyConditionExpression":"PK = :p","FilterExpression":"x = :p","ExpressionAttributeValues":{":p":{"S":"a"}}}`, false},
		{"Query", `{"TableName":"` + TestTable + `","KeyConditionExpression":"PK = :p","ExpressionAttributeValues":{":p":{"S":"a"}},"Limit":0}`, false},
	}
	for _, c := range cases {
		if _, fast := d.front.fastRead(c.op, []byte(c.body)); fast != c.fast {
			t.Errorf("%s %s: answered by the front %v, want %v", c.op, c.body, fast, c.fast)
		}
	}
	d.Server.EmulateFailureForTable(TestTable, "internal_server")
	if _, fast := d.front.fastRead(cases[0].op, []byte(cases[0].body)); fast {
		t.Error("a read was answered by the front while a failure was emulated")
	}
	d.Server.EmulateFailureForTable(TestTable, "none")
	if _, fast := d.front.fastRead(cases[0].op, []byte(cases[0].body)); !fast {
		t.Error("the front no longer answers once the emulation is cleared")
	}
}

// The stack's own client reaches the front in process; a program outside
// it reaches the same items over the loopback listener, signed, and the
// SDK's check of the answer's X-Amz-Crc32 holds there.
func TestEmbeddedClientsInProcessAndOverLoopback(t *testing.T) {
	ctx := t.Context()
	d, err := StartDynamo(ctx, TestTable)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	inproc := d.Client(ctx)
	if _, ok := inproc.Options().HTTPClient.(inProcessClient); !ok {
		t.Fatalf("the stack's client uses %T, want the in-process one", inproc.Options().HTTPClient)
	}
	remote := dynamodb.NewFromConfig(localConfig(d.AccessKey, "local"), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(d.Endpoint)
	})
	item := map[string]ddbtypes.AttributeValue{"PK": s("P"), "SK": s("1"), "v": s("in process")}
	if _, err := inproc.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(TestTable), Item: item}); err != nil {
		t.Fatal(err)
	}
	got, err := remote.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(TestTable), Key: map[string]ddbtypes.AttributeValue{"PK": s("P"), "SK": s("1")}})
	if err != nil {
		t.Fatalf("GetItem over loopback: %v", err)
	}
	if v, _ := got.Item["v"].(*ddbtypes.AttributeValueMemberS); v == nil || v.Value != "in process" {
		t.Errorf("over loopback: %v", got.Item)
	}
	var api smithy.APIError
	if _, err := inproc.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("missing"), Key: map[string]ddbtypes.AttributeValue{"PK": s("P"), "SK": s("1")}}); !errors.As(err, &api) || api.ErrorCode() != "ResourceNotFoundException" {
		t.Errorf("GetItem of a missing table in process: %v, want ResourceNotFoundException", err)
	}
}
