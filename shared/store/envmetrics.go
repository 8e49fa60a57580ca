package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/domain"
)

// An environment's coarse metrics history (docs/environments.md,
// "Metrics") is an item of its own beside the environment's, written once
// when its node reports its end, so reading or listing environments never
// pays for it:
//
//	PK ORG#<org>  SK METRICS#ENV#<id>  body: JSON samples  ttl: as the record's
type envMetricsItem struct {
	PK   string `dynamodbav:"PK"`
	SK   string `dynamodbav:"SK"`
	Body string `dynamodbav:"body"`
	TTL  int64  `dynamodbav:"ttl,omitempty"`
}

func envMetricsSK(id string) string { return "METRICS#ENV#" + id }

// PutEnvMetrics keeps an ended environment's coarse metrics history until
// purge (its record's purge time).
func (s *Store) PutEnvMetrics(ctx context.Context, org, id string, samples []domain.MetricSample, purge time.Time) error {
	body, err := json.Marshal(samples)
	if err != nil {
		return domain.Internal(fmt.Errorf("encode metrics: %w", err))
	}
	item, err := marshal(envMetricsItem{PK: orgPK(org), SK: envMetricsSK(id), Body: string(body), TTL: purge.Unix()})
	if err != nil {
		return err
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item})
	return dependencyError("put environment metrics", err)
}

// GetEnvMetrics reads an environment's kept metrics history; none (nil)
// when its node kept none.
func (s *Store) GetEnvMetrics(ctx context.Context, org, id string) ([]domain.MetricSample, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key(orgPK(org), envMetricsSK(id))})
	if err != nil {
		return nil, dependencyError("get environment metrics", err)
	}
	if out.Item == nil {
		return nil, nil
	}
	var it envMetricsItem
	if err := unmarshal(out.Item, &it); err != nil {
		return nil, err
	}
	var samples []domain.MetricSample
	if err := json.Unmarshal([]byte(it.Body), &samples); err != nil {
		return nil, domain.Internal(fmt.Errorf("decode metrics of %s: %w", id, err))
	}
	return samples, nil
}
