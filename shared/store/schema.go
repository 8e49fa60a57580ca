package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Attribute names of the single table. Every item has PK and SK; the GSI
// attributes are written only on items that belong in that index, so each
// index is sparse and its cost follows what is in it, not the table's history.
const (
	AttrPK     = "PK"
	AttrSK     = "SK"
	AttrGSI1PK = "GSI1PK"
	AttrGSI1SK = "GSI1SK"
	AttrGSI2PK = "GSI2PK"
	AttrGSI2SK = "GSI2SK"
	AttrGSI3PK = "GSI3PK"
	AttrGSI3SK = "GSI3SK"
	// AttrTTL holds epoch seconds after which DynamoDB TTL may delete the item.
	// TTL deletion is lazy (up to days late), so readers also compare it to now.
	AttrTTL = "ttl"
)

// Index names. GSI1 lists things inside an organization (live environments,
// sealed artifacts); GSI2 orders things by deadline across organizations for
// the scheduled jobs; GSI3 serves the node side (pending work per pool,
// environments per node).
const (
	IndexGSI1 = "GSI1"
	IndexGSI2 = "GSI2"
	IndexGSI3 = "GSI3"
)

// Index describes one global secondary index and what it projects.
// Projection is "KEYS_ONLY" or "INCLUDE" (with Include naming the non-key
// attributes): an index that projects an attribute is written again whenever
// that attribute changes, so each index carries only what a query must
// filter on, and readers fetch the base items they need (fetchItems).
type Index struct {
	Name         string
	PartitionKey string
	SortKey      string
	Projection   types.ProjectionType
	Include      []string
}

// TableSchema is the one definition of the table's keys and indexes. The CDK
// stack and local table creation both read it, so they cannot drift apart.
type TableSchema struct {
	PartitionKey string
	SortKey      string
	Indexes      []Index
	TTLAttribute string
	// DueShards is how many partitions each due index (environments, nodes,
	// artifacts) is spread over, so no one partition key takes the writes of
	// every organization. It may grow (items written under the smaller count
	// stay in shards the jobs still read) but must never shrink.
	DueShards int
}

// Schema is the table layout used by every part of the system.
var Schema = TableSchema{
	PartitionKey: AttrPK,
	SortKey:      AttrSK,
	Indexes: []Index{
		// Listings of an organization; the environment listing filters on
		// state, which only changes with the lifecycle, never on a touch.
		{Name: IndexGSI1, PartitionKey: AttrGSI1PK, SortKey: AttrGSI1SK,
			Projection: types.ProjectionTypeInclude, Include: []string{"state"}},
		// The jobs read the base items of what is due (BatchGetItem).
		{Name: IndexGSI2, PartitionKey: AttrGSI2PK, SortKey: AttrGSI2SK, Projection: types.ProjectionTypeKeysOnly},
		// Claims and node reports act on the base items (BatchGetItem).
		{Name: IndexGSI3, PartitionKey: AttrGSI3PK, SortKey: AttrGSI3SK, Projection: types.ProjectionTypeKeysOnly},
	},
	TTLAttribute: AttrTTL,
	DueShards:    32,
}

// Projects reports whether an item written with attribute attr lands that
// attribute in index ix (its keys, the table's keys, or an included one).
func (ix Index) Projects(attr string) bool {
	switch attr {
	case ix.PartitionKey, ix.SortKey, AttrPK, AttrSK:
		return true
	}
	if ix.Projection == types.ProjectionTypeAll {
		return true
	}
	for _, a := range ix.Include {
		if a == attr {
			return true
		}
	}
	return false
}

func (ix Index) projection() *types.Projection {
	p := &types.Projection{ProjectionType: ix.Projection}
	if ix.Projection == types.ProjectionTypeInclude {
		p.NonKeyAttributes = append([]string(nil), ix.Include...)
	}
	return p
}

// CreateTableInput renders the schema as an on-demand CreateTable request.
func (s TableSchema) CreateTableInput(name string) *dynamodb.CreateTableInput {
	attrs := []types.AttributeDefinition{
		{AttributeName: aws.String(s.PartitionKey), AttributeType: types.ScalarAttributeTypeS},
		{AttributeName: aws.String(s.SortKey), AttributeType: types.ScalarAttributeTypeS},
	}
	var gsis []types.GlobalSecondaryIndex
	for _, ix := range s.Indexes {
		attrs = append(attrs,
			types.AttributeDefinition{AttributeName: aws.String(ix.PartitionKey), AttributeType: types.ScalarAttributeTypeS},
			types.AttributeDefinition{AttributeName: aws.String(ix.SortKey), AttributeType: types.ScalarAttributeTypeS},
		)
		gsis = append(gsis, types.GlobalSecondaryIndex{
			IndexName: aws.String(ix.Name),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(ix.PartitionKey), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(ix.SortKey), KeyType: types.KeyTypeRange},
			},
			Projection: ix.projection(),
		})
	}
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: attrs,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(s.PartitionKey), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(s.SortKey), KeyType: types.KeyTypeRange},
		},
		GlobalSecondaryIndexes: gsis,
	}
}

// EnsureTable creates the table if it does not exist and waits until it is
// active. It is for local stacks and tests; in AWS the CDK stack owns the table.
func EnsureTable(ctx context.Context, db *dynamodb.Client, name string) error {
	_, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err == nil {
		return nil
	}
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) {
		return fmt.Errorf("describe table %s: %w", name, err)
	}
	if _, err := db.CreateTable(ctx, Schema.CreateTableInput(name)); err != nil {
		var inUse *types.ResourceInUseException
		if !errors.As(err, &inUse) {
			return fmt.Errorf("create table %s: %w", name, err)
		}
	}
	// A new table takes a moment to become ACTIVE on DynamoDB and LocalStack.
	// (minidyn reports no status at all: that counts as ready.)
	for deadline := time.Now().Add(2 * time.Minute); ; {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("describe table %s: %w", name, err)
		}
		if st := out.Table.TableStatus; st == "" || st == types.TableStatusActive {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("table %s is still %s", name, out.Table.TableStatus)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	// TTL is not enabled here: the CDK stack enables it wherever the table is
	// deployed (AWS, LocalStack); minidyn has no TTL (the dev server sweeps
	// its table itself, devstack's ExpireItems). Readers never rely on TTL
	// having run; they compare the ttl attribute to now, so locally expired
	// items only linger.
	return nil
}
