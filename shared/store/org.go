package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
)

type orgItem struct {
	PK   string `dynamodbav:"PK"`
	SK   string `dynamodbav:"SK"`
	ID   string `dynamodbav:"id"`
	Name string `dynamodbav:"name"`
	// Pools is left out when empty (PutOrg writes nil for none): minidyn
	// keeps an empty list wrongly, reading it back as another attribute's
	// string; DynamoDB keeps it, but absent is read the same.
	Pools []string `dynamodbav:"pools,omitempty"`
	// MaxTokenLifetime in seconds; absent for no cap.
	MaxTokenLifetime int64 `dynamodbav:"maxTokenLifetime,omitempty"`
	// MaxPreviewLifetime in seconds; absent for the service's maximum.
	MaxPreviewLifetime  int64 `dynamodbav:"maxPreviewLifetime,omitempty"`
	ForbidPublicExports bool  `dynamodbav:"forbidPublicExports,omitempty"`
}

type userItem struct {
	PK   string `dynamodbav:"PK"`
	SK   string `dynamodbav:"SK"`
	Org  string `dynamodbav:"org"`
	ID   string `dynamodbav:"id"`
	Role string `dynamodbav:"role"`
}

// templateItem keeps the template as JSON: its shape is the API's, and no
// query looks inside it.
type templateItem struct {
	PK   string `dynamodbav:"PK"`
	SK   string `dynamodbav:"SK"`
	Name string `dynamodbav:"name"`
	Body string `dynamodbav:"body"`
}

func templateSK(name string) string { return "TEMPLATE#" + name }

// QuotaSK is the sort key of a template's quota counter; the leasing
// transaction conditions on it.
func QuotaSK(template string) string { return "QUOTA#" + template }

// PutOrg writes or replaces an organization.
func (s *Store) PutOrg(ctx context.Context, o domain.Org) error {
	pools := o.Pools
	if len(pools) == 0 {
		pools = nil
	}
	item, err := marshal(orgItem{PK: orgPK(o.ID), SK: "ORG", ID: o.ID, Name: o.Name, Pools: pools,
		MaxTokenLifetime: int64(o.MaxTokenLifetime.Std() / time.Second), MaxPreviewLifetime: int64(o.MaxPreviewLifetime.Std() / time.Second),
		ForbidPublicExports: o.ForbidPublicExports})
	if err != nil {
		return err
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item})
	return dependencyError("put org", err)
}

// GetOrg reads an organization.
func (s *Store) GetOrg(ctx context.Context, id string) (domain.Org, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key(orgPK(id), "ORG")})
	if err != nil {
		return domain.Org{}, dependencyError("get org", err)
	}
	if out.Item == nil {
		return domain.Org{}, domain.NotFound("organization")
	}
	var it orgItem
	if err := unmarshal(out.Item, &it); err != nil {
		return domain.Org{}, err
	}
	if it.Pools == nil {
		it.Pools = []string{}
	}
	return domain.Org{ID: it.ID, Name: it.Name, Pools: it.Pools,
		MaxTokenLifetime:    domain.Duration(time.Duration(it.MaxTokenLifetime) * time.Second),
		MaxPreviewLifetime:  domain.Duration(time.Duration(it.MaxPreviewLifetime) * time.Second),
		ForbidPublicExports: it.ForbidPublicExports}, nil
}

// PutUser writes or replaces a person.
func (s *Store) PutUser(ctx context.Context, u domain.User) error {
	item, err := marshal(userItem{PK: orgPK(u.OrgID), SK: "USER#" + u.ID, Org: u.OrgID, ID: u.ID, Role: string(u.Role)})
	if err != nil {
		return err
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item})
	return dependencyError("put user", err)
}

// GetUser reads a person of an organization.
func (s *Store) GetUser(ctx context.Context, org, id string) (domain.User, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key(orgPK(org), "USER#"+id)})
	if err != nil {
		return domain.User{}, dependencyError("get user", err)
	}
	if out.Item == nil {
		return domain.User{}, domain.NotFound("user")
	}
	var it userItem
	if err := unmarshal(out.Item, &it); err != nil {
		return domain.User{}, err
	}
	return domain.User{OrgID: it.Org, ID: it.ID, Role: domain.Role(it.Role)}, nil
}

// PutTemplate writes a template and its quota limit. The running count of an
// existing quota is kept: configuration never resets what is live.
func (s *Store) PutTemplate(ctx context.Context, org string, t domain.Template) error {
	body, err := json.Marshal(t)
	if err != nil {
		return domain.Internal(fmt.Errorf("encode template: %w", err))
	}
	item, err := marshal(templateItem{PK: orgPK(org), SK: templateSK(t.Name), Name: t.Name, Body: string(body)})
	if err != nil {
		return err
	}
	_, err = s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(s.table), Item: item}},
		{Update: &types.Update{
			TableName:        aws.String(s.table),
			Key:              key(orgPK(org), QuotaSK(t.Name)),
			UpdateExpression: aws.String("SET maxLeases = :max, maxPaused = :maxPaused, template = :t, idleSeconds = :idle, hardSeconds = :hard, running = if_not_exists(running, :zero), paused = if_not_exists(paused, :zero)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":max": num(int64(t.Quota.MaxLeases)), ":maxPaused": num(int64(t.MaxPausedOrDefault())), ":t": str(t.Name), ":zero": num(0),
				":idle": num(t.Timeouts.Idle.Seconds()), ":hard": num(t.Timeouts.Hard.Seconds()),
			},
		}},
	}})
	return dependencyError("put template", err)
}

// GetTemplate reads one template of an organization.
func (s *Store) GetTemplate(ctx context.Context, org, name string) (domain.Template, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key(orgPK(org), templateSK(name))})
	if err != nil {
		return domain.Template{}, dependencyError("get template", err)
	}
	if out.Item == nil {
		return domain.Template{}, domain.NotFound("template")
	}
	return decodeTemplate(out.Item)
}

// ListTemplates returns an organization's templates in name order.
func (s *Store) ListTemplates(ctx context.Context, org string) ([]domain.Template, error) {
	items, err := queryAll[templateItem](ctx, s, "list templates", s.inPartition(orgPK(org), "TEMPLATE#"))
	if err != nil {
		return nil, err
	}
	out := make([]domain.Template, 0, len(items))
	for _, it := range items {
		t, err := it.template()
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func decodeTemplate(raw map[string]types.AttributeValue) (domain.Template, error) {
	var it templateItem
	if err := unmarshal(raw, &it); err != nil {
		return domain.Template{}, err
	}
	return it.template()
}

func (it templateItem) template() (domain.Template, error) {
	var t domain.Template
	if err := json.Unmarshal([]byte(it.Body), &t); err != nil {
		return domain.Template{}, domain.Internal(fmt.Errorf("decode template %s: %w", it.Name, err))
	}
	return t, nil
}
