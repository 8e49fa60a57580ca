package store

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// queryAll reads every page of a query and unmarshals each item into an I.
// It is for bounded collections (an organization's keys, templates, quotas):
// listings that grow with use are paged to the client instead.
func queryAll[I any](ctx context.Context, s *Store, op string, in *dynamodb.QueryInput) ([]I, error) {
	return queryUpTo[I](ctx, s, op, in, 0)
}

// queryUpTo is queryAll that reads no further page once it holds limit
// items (0: no limit); the last page read may take it past limit.
func queryUpTo[I any](ctx context.Context, s *Store, op string, in *dynamodb.QueryInput, limit int) ([]I, error) {
	var out []I
	p := dynamodb.NewQueryPaginator(s.db, in)
	for p.HasMorePages() && (limit == 0 || len(out) < limit) {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, dependencyError(op, err)
		}
		for _, raw := range page.Items {
			var it I
			if err := unmarshal(raw, &it); err != nil {
				return nil, err
			}
			out = append(out, it)
		}
	}
	return out, nil
}

// shardQuery reads one shard partition of the due records (offers, stop
// notices), at most limit items a page.
func (s *Store) shardQuery(pk string, limit int) *dynamodb.QueryInput {
	return &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		KeyConditionExpression:    aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(pk)},
		Limit:                     aws.Int32(int32(min(limit, 500))),
	}
}

// queryIndexAll is queryAll over an index that does not project what I
// needs: it reads every page of the query, then the base items it lists.
func queryIndexAll[I any](ctx context.Context, s *Store, op string, in *dynamodb.QueryInput) ([]I, error) {
	var refs []map[string]types.AttributeValue
	p := dynamodb.NewQueryPaginator(s.db, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, dependencyError(op, err)
		}
		refs = append(refs, page.Items...)
	}
	items, err := s.fetchItems(ctx, op, refs)
	if err != nil {
		return nil, err
	}
	out := make([]I, 0, len(items))
	for _, raw := range items {
		var it I
		if err := unmarshal(raw, &it); err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, nil
}

// inPartition queries the items of partition pk whose sort key starts with prefix.
func (s *Store) inPartition(pk, prefix string) *dynamodb.QueryInput {
	return &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		KeyConditionExpression: aws.String("PK = :pk AND begins_with(SK, :sk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": str(pk), ":sk": str(prefix),
		},
	}
}

// getOne reads one item, strongly consistent, and decodes it. what names
// it in the errors: NotFound(what) when there is none, "get <what>" for a
// failing dependency.
func getOne[I any](ctx context.Context, s *Store, what string, k map[string]types.AttributeValue) (I, error) {
	var it I
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return it, dependencyError("get "+what, err)
	}
	if out.Item == nil {
		return it, domain.NotFound(what)
	}
	err = unmarshal(out.Item, &it)
	return it, err
}
