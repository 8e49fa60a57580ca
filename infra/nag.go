package main

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// nagRule is one cdk-nag suppression. Every suppression in this app says why
// the finding does not apply; AppliesTo narrows it to named findings (for
// AwsSolutions-IAM5, the exact wildcard resource).
type nagRule struct {
	ID        string
	Reason    string
	AppliesTo []string
}

func (r nagRule) suppression() *cdknag.NagPackSuppression {
	s := &cdknag.NagPackSuppression{Id: jsii.String(r.ID), Reason: jsii.String(r.Reason)}
	if len(r.AppliesTo) > 0 {
		applies := make([]interface{}, len(r.AppliesTo))
		for i, a := range r.AppliesTo {
			applies[i] = a
		}
		s.AppliesTo = &applies
	}
	return s
}

// suppress attaches the rules to one construct (and its default resource).
func suppress(c constructs.IConstruct, rules ...nagRule) {
	addSuppressions(c, false, rules)
}

// suppressTree attaches the rules to a construct and everything under it.
func suppressTree(c constructs.IConstruct, rules ...nagRule) {
	addSuppressions(c, true, rules)
}

func addSuppressions(c constructs.IConstruct, children bool, rules []nagRule) {
	list := make([]*cdknag.NagPackSuppression, len(rules))
	for i, r := range rules {
		list[i] = r.suppression()
	}
	cdknag.NagSuppressions_AddResourceSuppressions(c, &list, jsii.Bool(children))
}

// logicalID is the CloudFormation logical id of a construct's main resource,
// as cdk-nag prints it in findings such as "Resource::<Id.Arn>/orgs/*".
func logicalID(c constructs.IConstruct) string {
	res := c.Node().DefaultChild().(awscdk.CfnElement)
	switch id := awscdk.Stack_Of(c).Resolve(res.LogicalId()).(type) {
	case string:
		return id
	case *string:
		return *id
	default:
		panic(fmt.Sprintf("logical id of %s resolved to %T", *c.Node().Path(), id))
	}
}

// addNagChecks runs cdk-nag's AwsSolutions pack over everything in scope:
// findings become error and warning annotations of the synthesized stack.
func addNagChecks(scope constructs.IConstruct, reports bool) {
	awscdk.Aspects_Of(scope).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{
		Verbose: jsii.Bool(true),
		Reports: jsii.Bool(reports),
	}), nil)
}
