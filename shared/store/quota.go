package store

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// quotaItem is ORG#<org> QUOTA#<template>: the limit, written by
// PutTemplate, and the count of live environments, changed only by the lease
// and stop transactions.
type quotaItem struct {
	PK        string `dynamodbav:"PK"`
	SK        string `dynamodbav:"SK"`
	Template  string `dynamodbav:"template"`
	MaxLeases int    `dynamodbav:"maxLeases"`
	Running   int    `dynamodbav:"running"`
}

// ListQuotas reads an organization's quota counters, strongly consistent so
// `running` includes a lease or delete that just returned.
func (s *Store) ListQuotas(ctx context.Context, org string) ([]domain.QuotaCount, error) {
	var out []domain.QuotaCount
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		KeyConditionExpression: aws.String("PK = :pk AND begins_with(SK, :sk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": str(orgPK(org)), ":sk": str("QUOTA#"),
		},
		ConsistentRead: aws.Bool(true),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, dependencyError("list quotas", err)
		}
		for _, raw := range page.Items {
			var it quotaItem
			if err := unmarshal(raw, &it); err != nil {
				return nil, err
			}
			out = append(out, domain.QuotaCount{Template: it.Template, MaxLeases: it.MaxLeases, Running: it.Running})
		}
	}
	return out, nil
}
