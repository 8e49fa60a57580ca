package main

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// The environments' identity issuer (docs/identity.md): a KMS asymmetric
// key that signs their tokens, which only the functions of groups with
// SignsIdentity may use, and only to sign and read its public half. This
// file is apart from the stack's other keys and grants, and only adds.

// identityKMSActions are all the identity function may do with its key.
var identityKMSActions = []string{"kms:Sign", "kms:GetPublicKey"}

// newIdentityKey is the issuer's signing key: ECC_NIST_P256 for
// SIGN_VERIFY, kept if the stack is deleted (tokens it signed may still be
// verified; a new stack would sign with a new key anyway). Its key policy
// is CDK's default, which leaves administration to the account's IAM; no
// principal is named in it.
func newIdentityKey(stack awscdk.Stack) awskms.Key {
	return awskms.NewKey(stack, jsii.String("IdentityKey"), &awskms.KeyProps{
		Description:   jsii.String("envlease: signs environments' identity tokens (docs/identity.md)"),
		KeySpec:       awskms.KeySpec_ECC_NIST_P256,
		KeyUsage:      awskms.KeyUsage_SIGN_VERIFY,
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
	})
}

// wireIdentity gives the signing functions the key (IDENTITY_KMS_KEY, the
// two actions on that key alone) and the issuer's URL (ISSUER_URL): the
// configured one, else the HTTP API's own endpoint.
func (s *EnvleaseStack) wireIdentity(groups []Group, issuerURL string) {
	issuer := s.Api.ApiEndpoint()
	if issuerURL != "" {
		issuer = jsii.String(strings.TrimRight(issuerURL, "/"))
	}
	for _, g := range groups {
		if !g.SignsIdentity {
			continue
		}
		fn := s.Functions[g.Name]
		fn.AddEnvironment(jsii.String("IDENTITY_KMS_KEY"), s.IdentityKey.KeyArn(), nil)
		fn.AddEnvironment(jsii.String("ISSUER_URL"), issuer, nil)
		fn.Role().AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("IdentityKey"),
			Actions:   jsii.Strings(identityKMSActions...),
			Resources: jsii.Strings(*s.IdentityKey.KeyArn()),
		}))
	}
	awscdk.NewCfnOutput(s.Stack, jsii.String("IssuerUrl"), &awscdk.CfnOutputProps{
		Value: issuer, Description: jsii.String("the environments' OIDC issuer (docs/identity.md)")})
	awscdk.NewCfnOutput(s.Stack, jsii.String("IdentityKeyArn"), &awscdk.CfnOutputProps{
		Value: s.IdentityKey.KeyArn(), Description: jsii.String("the KMS key that signs identity tokens")})
}

// checkIssuerURL: an issuer a cloud can reach is HTTPS, with no query or
// fragment (OIDC's issuer identifier).
func checkIssuerURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("issuer URL %q must be https://host[/path], without query or fragment", s)
	}
	return nil
}

// WorkloadRoleProps describe a role that environments of one template (and
// project) assume with their identity tokens (docs/identity.md, "AWS").
type WorkloadRoleProps struct {
	// IssuerURL is the envlease issuer (https://host[/path]): a literal, as
	// IAM's condition keys are named after it.
	IssuerURL string
	// Subject is the sub claim the role admits, exactly or as a StringLike
	// pattern: org:<org>:template:<template>:project:<project>.
	Subject string
	// Audience is the aud claim the role admits (default sts.amazonaws.com).
	Audience string
	// ProviderARN is the account's IAM OIDC provider of the issuer; empty
	// makes one (an account has one per issuer URL).
	ProviderARN string
	// Description of the role.
	Description string
}

// WorkloadRole is an IAM role trusting the envlease issuer for one subject.
type WorkloadRole struct {
	Role        awsiam.Role
	ProviderARN *string
}

var subjectPattern = regexp.MustCompile(`^org:[a-z0-9-]+:template:[a-z0-9-]+:project:.*$`)

// NewWorkloadRole makes the role (and the OIDC provider if none is given):
// sts:AssumeRoleWithWebIdentity for tokens whose aud is the audience and
// whose sub matches the subject. It grants nothing else: attach the
// policies the template's environments need to Role.
func NewWorkloadRole(scope constructs.Construct, id string, p WorkloadRoleProps) (*WorkloadRole, error) {
	if err := checkIssuerURL(p.IssuerURL); err != nil || p.IssuerURL == "" {
		return nil, fmt.Errorf("workload role %s: %v (an issuer URL is required)", id, err)
	}
	if !subjectPattern.MatchString(p.Subject) {
		return nil, fmt.Errorf("workload role %s: subject %q is not org:<org>:template:<template>:project:<project>", id, p.Subject)
	}
	aud := p.Audience
	if aud == "" {
		aud = "sts.amazonaws.com"
	}
	c := constructs.NewConstruct(scope, jsii.String(id))
	host := strings.TrimPrefix(strings.TrimRight(p.IssuerURL, "/"), "https://")
	arn := p.ProviderARN
	if arn == "" {
		prov := awsiam.NewCfnOIDCProvider(c, jsii.String("Provider"), &awsiam.CfnOIDCProviderProps{
			Url:          jsii.String(strings.TrimRight(p.IssuerURL, "/")),
			ClientIdList: jsii.Strings(aud),
		})
		arn = *prov.AttrArn()
	}
	desc := p.Description
	if desc == "" {
		desc = "assumed by envlease environments whose identity's sub is " + p.Subject
	}
	role := awsiam.NewRole(c, jsii.String("Role"), &awsiam.RoleProps{
		Description: jsii.String(desc),
		AssumedBy: awsiam.NewWebIdentityPrincipal(jsii.String(arn), &map[string]interface{}{
			"StringEquals": map[string]interface{}{host + ":aud": aud},
			"StringLike":   map[string]interface{}{host + ":sub": p.Subject},
		}),
		MaxSessionDuration: awscdk.Duration_Hours(jsii.Number(1)),
	})
	awscdk.NewCfnOutput(c, jsii.String("RoleArn"), &awscdk.CfnOutputProps{
		Value: role.RoleArn(), Description: jsii.String("AWS_ROLE_ARN for environments of " + p.Subject)})
	return &WorkloadRole{Role: role, ProviderARN: jsii.String(arn)}, nil
}
