package store

import (
	"context"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

// Trusted OIDC issuers of an organization:
//
//	ORG#<org>   ISSUER#<id>   one issuer with its conditions and grant
//
// An exchange reads them all with one query of the organization's
// partition; an organization has a handful at most.
type issuerItem struct {
	PK            string               `dynamodbav:"PK"`
	SK            string               `dynamodbav:"SK"`
	Org           string               `dynamodbav:"org"`
	ID            string               `dynamodbav:"id"`
	Name          string               `dynamodbav:"name"`
	URL           string               `dynamodbav:"url"`
	Audience      string               `dynamodbav:"audience"`
	Conditions    map[string]string    `dynamodbav:"conditions"`
	Scopes        []string             `dynamodbav:"scopes"`
	Restrictions  *domain.Restrictions `dynamodbav:"restrictions,omitempty"`
	TokenLifetime int64                `dynamodbav:"tokenLifetime"`
	Expires       *time.Time           `dynamodbav:"expires,omitempty"`
	Created       time.Time            `dynamodbav:"created"`
	CreatedBy     string               `dynamodbav:"createdBy"`
}

func issuerSK(id string) string { return "ISSUER#" + id }

// PutIssuer writes a new trusted issuer.
func (s *Store) PutIssuer(ctx context.Context, is domain.TrustedIssuer) error {
	return s.putNewWithEvent(ctx, "put issuer", issuerItem{
		PK: orgPK(is.OrgID), SK: issuerSK(is.ID), Org: is.OrgID, ID: is.ID, Name: is.Name, URL: is.URL,
		Audience: is.Audience, Conditions: is.Conditions, Scopes: is.Scopes, Restrictions: is.Restrictions,
		TokenLifetime: int64(is.TokenLifetime.Std() / time.Second), Expires: is.Expires, Created: is.Created, CreatedBy: is.CreatedBy,
	}, "an issuer with this id already exists", domain.NewEvent(ctx, domain.EventIssuerTrusted, is.OrgID,
		domain.Subject{Kind: "issuer", ID: is.ID}, is.Created, map[string]any{
			"name": is.Name, "url": is.URL, "audience": is.Audience, "conditions": is.Conditions, "scopes": is.Scopes,
		}))
}

// ListIssuers returns an organization's trusted issuers, oldest first.
func (s *Store) ListIssuers(ctx context.Context, org string) ([]domain.TrustedIssuer, error) {
	in := s.inPartition(orgPK(org), "ISSUER#")
	in.ConsistentRead = aws.Bool(true)
	items, err := queryAll[issuerItem](ctx, s, "list issuers", in)
	if err != nil {
		return nil, err
	}
	out := make([]domain.TrustedIssuer, len(items))
	for i, it := range items {
		out[i] = domain.TrustedIssuer{
			OrgID: it.Org, ID: it.ID, Name: it.Name, URL: it.URL, Audience: it.Audience, Conditions: it.Conditions,
			Scopes: it.Scopes, Restrictions: it.Restrictions, TokenLifetime: domain.Duration(time.Duration(it.TokenLifetime) * time.Second),
			Expires: utcPtr(it.Expires), Created: it.Created.UTC(), CreatedBy: it.CreatedBy,
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// DeleteIssuer removes a trusted issuer; tokens it already issued keep
// working until they expire (revoke them to end them sooner).
func (s *Store) DeleteIssuer(ctx context.Context, org, id string, now time.Time) error {
	if !idOK(id) {
		return domain.NotFound("issuer")
	}
	reasons, err := s.transactWithEvent(ctx, "delete issuer", types.TransactWriteItem{Delete: &types.Delete{
		TableName: aws.String(s.table), Key: key(orgPK(org), issuerSK(id)),
		ConditionExpression: aws.String("attribute_exists(PK)"),
	}}, domain.NewEvent(ctx, domain.EventIssuerRemoved, org, domain.Subject{Kind: "issuer", ID: id}, now, map[string]any{}))
	if err != nil {
		return err
	}
	if conditionFailed(reasons, 0) {
		return domain.NotFound("issuer")
	}
	return nil
}
