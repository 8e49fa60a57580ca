package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/envlease/envlease/shared/domain"
	"github.com/envlease/envlease/shared/usage"
)

// An organization's budgets live in one item, with what the budget run
// found:
//
//	ORG#<org>       BUDGETS   body (JSON []usage.Budget), blocked (map), alerts (JSON), version
//	BUDGETORG#<n>   ORG#<org> the organization has budgets: the budget run lists these
//
// blocked maps the usage.BlockKey of each budget spent in its current period
// to the budget's id (omitted when empty). The lease transaction holds a
// condition check on the item (LeaseEnvironment): none of the lease's
// usage.LeaseBlockKeys may be a key of blocked. So the check at lease costs no call of its own, and the
// quota stays exact: it is one more condition of the same transaction.

const budgetsSK = "BUDGETS"

// BudgetOrgPK is the base of the partitions listing organizations that have
// budgets, sharded like the due indexes so no partition takes every
// organization's writes.
const BudgetOrgPK = "BUDGETORG"

type budgetsItem struct {
	PK      string            `dynamodbav:"PK"`
	SK      string            `dynamodbav:"SK"`
	Body    string            `dynamodbav:"body"`
	Blocked map[string]string `dynamodbav:"blocked,omitempty"`
	Alerts  string            `dynamodbav:"alerts"`
	Version int64             `dynamodbav:"version"`
}

// GetBudgets reads an organization's budgets (none at version 0).
func (s *Store) GetBudgets(ctx context.Context, org string) (usage.BudgetState, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: key(orgPK(org), budgetsSK), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return usage.BudgetState{}, dependencyError("get budgets", err)
	}
	st := usage.BudgetState{Budgets: []usage.Budget{}, Alerts: map[string]string{}, Blocked: map[string]string{}}
	if out.Item == nil {
		return st, nil
	}
	return decodeBudgets(org, out.Item)
}

func decodeBudgets(org string, raw map[string]types.AttributeValue) (usage.BudgetState, error) {
	var it budgetsItem
	if err := unmarshal(raw, &it); err != nil {
		return usage.BudgetState{}, err
	}
	st := usage.BudgetState{Budgets: []usage.Budget{}, Alerts: map[string]string{}, Blocked: it.Blocked, Version: it.Version}
	if st.Blocked == nil {
		st.Blocked = map[string]string{}
	}
	if it.Body != "" {
		if err := json.Unmarshal([]byte(it.Body), &st.Budgets); err != nil {
			return usage.BudgetState{}, domain.Internal(fmt.Errorf("decode budgets of %s: %w", org, err))
		}
	}
	if it.Alerts != "" {
		if err := json.Unmarshal([]byte(it.Alerts), &st.Alerts); err != nil {
			return usage.BudgetState{}, domain.Internal(fmt.Errorf("decode budget alerts of %s: %w", org, err))
		}
	}
	return st, nil
}

// PutBudgets replaces an organization's budgets if the item is still at
// version (a lost race is 409), keeping the blocked entries and alerts of
// budgets that stay, and registers the organization for the budget run.
// Removing every budget leaves the registration, which the run drops.
func (s *Store) PutBudgets(ctx context.Context, org string, st usage.BudgetState) error {
	put, err := s.budgetsPut(org, st)
	if err != nil {
		return err
	}
	items := []types.TransactWriteItem{put}
	if len(st.Budgets) > 0 {
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String(s.table),
			Item:      map[string]types.AttributeValue{AttrPK: str(s.budgetOrgPK(org)), AttrSK: str(orgPK(org)), "org": str(org)},
		}})
	}
	reasons, err := s.transact(ctx, "put budgets", items)
	if err != nil {
		return err
	}
	if reasons != nil {
		return domain.Errorf(domain.CodeConflict, "the budgets changed meanwhile; read them again and retry")
	}
	return nil
}

// budgetsPut replaces the budgets item if it is still at st.Version (0: absent).
func (s *Store) budgetsPut(org string, st usage.BudgetState) (types.TransactWriteItem, error) {
	sort.Slice(st.Budgets, func(i, j int) bool { return st.Budgets[i].ID < st.Budgets[j].ID })
	body, err := json.Marshal(st.Budgets)
	if err != nil {
		return types.TransactWriteItem{}, domain.Internal(fmt.Errorf("encode budgets: %w", err))
	}
	alerts, err := json.Marshal(st.Alerts)
	if err != nil {
		return types.TransactWriteItem{}, domain.Internal(fmt.Errorf("encode budget alerts: %w", err))
	}
	it := budgetsItem{PK: orgPK(org), SK: budgetsSK, Body: string(body), Blocked: st.Blocked, Alerts: string(alerts), Version: st.Version + 1}
	if len(it.Blocked) == 0 {
		it.Blocked = nil // omitted: see the note on envItem
	}
	item, err := marshal(it)
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.table), Item: item,
		ConditionExpression:       aws.String("attribute_not_exists(PK) OR version = :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": num(st.Version)},
	}}, nil
}

// SetBudgetState records what a budget run found, with the alert events it
// raises, in one transaction, if the budgets are still at st.Version (an
// admin's change meanwhile wins; the next run looks again). It reports
// whether it wrote.
func (s *Store) SetBudgetState(ctx context.Context, org string, st usage.BudgetState, events []domain.Event) (bool, error) {
	if st.Version == 0 {
		return false, nil // no budgets item: nothing to record
	}
	put, err := s.budgetsPut(org, st)
	if err != nil {
		return false, err
	}
	items := []types.TransactWriteItem{put}
	for _, ev := range events {
		put, err := s.eventPut(ev)
		if err != nil {
			return false, err
		}
		items = append(items, put)
	}
	reasons, err := s.transact(ctx, "set budget state", items)
	if err != nil {
		return false, err
	}
	return reasons == nil, nil
}

func (s *Store) budgetOrgPK(org string) string {
	return shardPK(BudgetOrgPK, s.shardOf(org, "budgets"))
}

// BudgetOrgs lists the organizations registered for the budget run: one
// query per shard.
func (s *Store) BudgetOrgs(ctx context.Context) ([]string, error) {
	var out []string
	for i := range s.shards {
		items, err := queryAll[struct {
			Org string `dynamodbav:"org"`
		}](ctx, s, "list budget organizations", s.inPartition(shardPK(BudgetOrgPK, i), "ORG#"))
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			out = append(out, it.Org)
		}
	}
	return out, nil
}

// DropBudgetOrg removes an organization's registration for the budget run,
// if it still has no budgets.
func (s *Store) DropBudgetOrg(ctx context.Context, org string) error {
	_, err := s.transact(ctx, "drop budget organization", []types.TransactWriteItem{
		{ConditionCheck: &types.ConditionCheck{
			TableName: aws.String(s.table), Key: key(orgPK(org), budgetsSK),
			ConditionExpression:       aws.String("attribute_not_exists(PK) OR body = :none"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":none": str("[]")},
		}},
		{Delete: &types.Delete{TableName: aws.String(s.table), Key: key(s.budgetOrgPK(org), orgPK(org))}},
	})
	return err // a refused condition (budgets came back meanwhile) keeps the registration
}

// budgetCheck is the lease transaction's condition on the organization's
// budgets: none of keys (usage.LeaseBlockKeys) is a key of blocked. An
// organization without the item, or with nothing spent, passes. The refused
// item comes back so the 429 can name the budget.
func (s *Store) budgetCheck(org string, keys []string) types.TransactWriteItem {
	names := map[string]string{"#b": "blocked"}
	cond := ""
	for i, k := range keys {
		n := fmt.Sprintf("#k%d", i)
		names[n] = k
		if i > 0 {
			cond += " AND "
		}
		cond += "attribute_not_exists(#b." + n + ")"
	}
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(s.table), Key: key(orgPK(org), budgetsSK),
		ConditionExpression: aws.String(cond), ExpressionAttributeNames: names,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
}

// budgetRefused is the 429 of a lease whose budget is spent, naming it.
func budgetRefused(e domain.Environment, old map[string]types.AttributeValue) error {
	id := ""
	var st usage.BudgetState
	if old != nil {
		if dec, err := decodeBudgets(e.OrgID, old); err == nil {
			st = dec
			id = usage.BlockedBy(st.Blocked, e, e.Created)
		}
	}
	for _, b := range st.Budgets {
		if b.ID == id {
			unit := "seconds"
			if b.Cost > 0 {
				unit = "cost"
			}
			return &domain.Error{Code: domain.CodeBudget, Message: fmt.Sprintf(
				"budget %q is spent: %s (%s) may use %v %s per %s, and has; leases in its scope are refused until the period ends or an admin raises it",
				b.ID, b.Scope, b.Period, b.Limit(), unit, b.Period)}
		}
	}
	return &domain.Error{Code: domain.CodeBudget, Message: fmt.Sprintf("budget %q is spent; leases in its scope are refused until its period ends", id)}
}
