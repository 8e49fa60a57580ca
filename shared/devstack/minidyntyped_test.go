package devstack

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/store"
)

// A cancelled transaction leaves every item as it was, empty lists and maps
// included: minidyn rolls a cancelled transaction back by restoring a copy
// of the whole table, and its copy turns an empty list or map into a value
// of no type, which every later expression over the item refuses
// ("unsupported expression or attribute type"). The stack's front never
// keeps minidyn's copy, and reads what a write left from minidyn's typed
// items, not its wire answer, which drops empty lists and maps too
// (minidyntyped.go, docs/local.md).
func TestCancelledTransactionKeepsEmptyListsAndMaps(t *testing.T) {
	d := NewTestDynamo(t)
	ctx := t.Context()
	db := d.Client(ctx)
	s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	key := func(sk string) map[string]ddbtypes.AttributeValue {
		return map[string]ddbtypes.AttributeValue{store.AttrPK: s("ORG#acme"), store.AttrSK: s(sk)}
	}
	// One item written whole, one made by an update: both hold an empty
	// list and an empty map.
	put := key("ENV#1")
	put["exports"] = &ddbtypes.AttributeValueMemberL{Value: []ddbtypes.AttributeValue{}}
	put["labels"] = &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{}}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(TestTable), Item: put}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(TestTable), Key: key("ENV#2"),
		UpdateExpression: aws.String("SET exports = :l, labels = :m"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":l": &ddbtypes.AttributeValueMemberL{Value: []ddbtypes.AttributeValue{}},
			":m": &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{}},
		}}); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		// A transaction whose condition fails, as a lease refused by its
		// quota is.
		_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
			{Put: &ddbtypes.Put{TableName: aws.String(TestTable), Item: key("ENV#3")}},
			{ConditionCheck: &ddbtypes.ConditionCheck{TableName: aws.String(TestTable), Key: key("ENV#1"),
				ConditionExpression: aws.String("attribute_not_exists(PK)")}},
		}})
		var canceled *ddbtypes.TransactionCanceledException
		if !errors.As(err, &canceled) {
			t.Fatalf("round %d: the transaction was not cancelled: %v", round, err)
		}
		out, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(TestTable),
			KeyConditionExpression: aws.String("PK = :pk AND begins_with(SK, :env)"),
			// Both values are still an empty list and an empty map to the
			// emulator's expressions. (Read back, minidyn sends either as
			// a value of no type: docs/local.md.)
			FilterExpression:          aws.String("size(exports) = :zero AND size(labels) = :zero"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": s("ORG#acme"), ":env": s("ENV#"), ":zero": &ddbtypes.AttributeValueMemberN{Value: "0"}},
			ConsistentRead:            aws.Bool(true)})
		if err != nil {
			t.Fatalf("round %d: query after a cancelled transaction: %v", round, err)
		}
		if len(out.Items) != 2 {
			t.Fatalf("round %d: %d items, want the 2 written (the cancelled put left none)", round, len(out.Items))
		}
	}
}
