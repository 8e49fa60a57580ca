package devstack

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// BenchmarkEmbeddedCalls measures one call of each kind the API makes most,
// through the SDK client of the embedded DynamoDB (the front, minidyn for
// writes), on a table of 1,000 items: the CPU a call costs the process
// (cpu-µs/op, steadier than the wall time on a busy machine).
//
//	go test ./shared/devstack -run '^$' -bench EmbeddedCalls
func BenchmarkEmbeddedCalls(b *testing.B) {
	ctx := b.Context()
	d, err := StartDynamo(ctx, TestTable)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	db := d.Client(ctx)
	table := aws.String(TestTable)
	item := func(pk, sk string) map[string]ddbtypes.AttributeValue {
		return map[string]ddbtypes.AttributeValue{"PK": s(pk), "SK": s(sk), "GSI1PK": s("G#" + pk), "GSI1SK": s(sk),
			"state": s("running"), "template": s("crowd"), "labels": &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{"a": s("b")}},
			"n": &ddbtypes.AttributeValueMemberN{Value: "12"}}
	}
	for i := range 1000 {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: item(fmt.Sprintf("ORG#%d", i%10), fmt.Sprintf("ENV#%04d", i))}); err != nil {
			b.Fatal(err)
		}
	}
	key := map[string]ddbtypes.AttributeValue{"PK": s("ORG#3"), "SK": s("ENV#0003")}
	calls := []struct {
		name string
		call func() error
	}{
		{"GetItem", func() error {
			_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: key, ConsistentRead: aws.Bool(true)})
			return err
		}},
		{"BatchGetItem", func() error {
			// As a credential lookup or a batch of due items reads: a few
			// keys of one table, one of them missing.
			_, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]ddbtypes.KeysAndAttributes{TestTable: {
				Keys: []map[string]ddbtypes.AttributeValue{key, {"PK": s("ORG#4"), "SK": s("ENV#0004")}, {"PK": s("ORG#4"), "SK": s("ENV#none")}}, ConsistentRead: aws.Bool(true)}}})
			return err
		}},
		{"Query", func() error {
			_, err := db.Query(ctx, &dynamodb.QueryInput{TableName: table, KeyConditionExpression: aws.String("PK = :p AND begins_with(SK, :s)"),
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": s("ORG#3"), ":s": s("ENV#00")}, Limit: aws.Int32(10)})
			return err
		}},
		{"UpdateItem", func() error {
			_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: table, Key: key, UpdateExpression: aws.String("SET #s = :s"),
				ConditionExpression:      aws.String("attribute_exists(PK)"),
				ExpressionAttributeNames: map[string]string{"#s": "state"}, ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":s": s("ready")}})
			return err
		}},
		{"TransactWriteItems", func() error {
			_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
				{Put: &ddbtypes.Put{TableName: table, Item: item("ORG#3", "ENV#new")}},
				{Update: &ddbtypes.Update{TableName: table, Key: key, UpdateExpression: aws.String("SET n = n + :one"),
					ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "1"}}}},
			}})
			return err
		}},
	}
	for _, c := range calls {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				if err := c.call(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
