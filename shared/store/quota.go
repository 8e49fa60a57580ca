package store

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

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
	// MaxPaused and Paused are the limit and count of paused environments
	// (pause.go), apart from running.
	MaxPaused int `dynamodbav:"maxPaused"`
	Paused    int `dynamodbav:"paused"`
	// The template's timeouts in seconds, written with the limit.
	IdleSeconds int64 `dynamodbav:"idleSeconds"`
	HardSeconds int64 `dynamodbav:"hardSeconds"`
}

// ListQuotas reads an organization's quota counters, strongly consistent so
// `running` includes a lease or delete that just returned.
func (s *Store) ListQuotas(ctx context.Context, org string) ([]domain.QuotaCount, error) {
	in := s.inPartition(orgPK(org), "QUOTA#")
	in.ConsistentRead = aws.Bool(true)
	items, err := queryAll[quotaItem](ctx, s, "list quotas", in)
	if err != nil {
		return nil, err
	}
	out := make([]domain.QuotaCount, len(items))
	for i, it := range items {
		out[i] = domain.QuotaCount{
			Template: it.Template, MaxLeases: it.MaxLeases, Running: it.Running, MaxPaused: it.MaxPaused, Paused: it.Paused,
			Idle: domain.Duration(time.Duration(it.IdleSeconds) * time.Second),
			Hard: domain.Duration(time.Duration(it.HardSeconds) * time.Second),
		}
	}
	return out, nil
}
