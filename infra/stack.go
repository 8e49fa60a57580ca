package main

import (
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/envlease/envlease/shared/store"
)

// EnvleaseStackProps configure the stack. Groups and AssetDirs are injectable
// so the tests can synthesize against a chosen set of functions.
type EnvleaseStackProps struct {
	awscdk.StackProps
	// Groups are the functions to deploy (normally Groups from groups.go).
	Groups []Group
	// AssetDirs maps each group name to a directory holding only its
	// bootstrap binary.
	AssetDirs map[string]string
	// LogLevel is the functions' LOG_LEVEL (debug, info, warn, error).
	LogLevel string
	// Tracing turns on X-Ray active tracing for every function.
	Tracing bool
	// ThrottleRate and ThrottleBurst are the stage's default route limits.
	ThrottleRate  float64
	ThrottleBurst float64
	// AlarmEmail, if set, subscribes an address to the alarm topic.
	AlarmEmail string
	// SAMLocal declares AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_S3 (empty,
	// which the SDK ignores) on every function: sam local only lets
	// --env-vars set variables the template declares, and these point the
	// SDK at a local stack such as LocalStack.
	SAMLocal bool
	// PreviewDomain is the domain preview links are named under
	// ({export}-{env}.PreviewDomain, "{node}" standing for the node's
	// name), given to the functions that make them as PREVIEW_DOMAIN.
	// Empty: no previews outside nodes on loopback (docs/previews.md).
	PreviewDomain string
	// NoReservedConcurrency leaves out the groups' concurrency reservations,
	// for accounts whose Lambda concurrency quota is still too small to hold
	// them (new accounts start far below 1,000).
	NoReservedConcurrency bool
	// IssuerURL is the environments' OIDC issuer (https://..., the API's
	// custom domain); empty: the HTTP API's own endpoint (docs/identity.md).
	IssuerURL string
	// WorkloadRoles are roles that environments assume with their
	// identity (NewWorkloadRole), for an IssuerURL; none by default.
	WorkloadRoles []WorkloadRoleProps
	// ConsoleOrigins are further origins (https://console.example.com) the
	// web console is served from, such as custom domains of the API; the
	// API's own endpoint is always allowed.
	ConsoleOrigins []string
}

// EnvleaseStack is the whole service in one stack.
type EnvleaseStack struct {
	awscdk.Stack
	Table      awsdynamodb.Table
	Bucket     awss3.Bucket
	Api        awsapigatewayv2.HttpApi
	NodeSocket awsapigatewayv2.WebSocketApi
	Functions  map[string]awslambda.Function
	DLQ        awssqs.Queue
	LinkSecret awssecretsmanager.Secret
	SecretsKey awskms.Key
	AlarmTopic awssns.Topic
	// IdentityKey signs environments' identity tokens (identity.go).
	IdentityKey awskms.Key
}

// accessLogFormat is the HTTP API's access log line: one JSON object per
// request. It never includes headers, so tokens cannot leak into logs.
var accessLogFormat = jsonLine([][2]string{
	{"requestId", "$context.requestId"},
	{"ip", "$context.identity.sourceIp"},
	{"requestTime", "$context.requestTime"},
	{"method", "$context.httpMethod"},
	{"routeKey", "$context.routeKey"},
	{"path", "$context.path"},
	{"protocol", "$context.protocol"},
	{"status", "$context.status"},
	{"responseLength", "$context.responseLength"},
	{"latency", "$context.responseLatency"},
	{"integrationLatency", "$context.integrationLatency"},
	{"integrationStatus", "$context.integrationStatus"},
	{"integrationError", "$context.integrationErrorMessage"},
	{"error", "$context.error.message"},
	{"userAgent", "$context.identity.userAgent"},
})

func jsonLine(fields [][2]string) string {
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = fmt.Sprintf("%q:%q", f[0], f[1])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// NewEnvleaseStack defines the table, bucket, functions, HTTP API, schedules,
// link-signing identity, dead-letter queue and alarms.
func NewEnvleaseStack(scope constructs.Construct, id string, props *EnvleaseStackProps) (*EnvleaseStack, error) {
	if props == nil || len(props.Groups) == 0 {
		return nil, fmt.Errorf("stack %s: no function groups", id)
	}
	for _, g := range props.Groups {
		if props.AssetDirs[g.Name] == "" {
			return nil, fmt.Errorf("stack %s: no built asset for function %q", id, g.Name)
		}
	}
	for _, o := range props.ConsoleOrigins {
		if err := checkOrigin(o); err != nil {
			return nil, fmt.Errorf("stack %s: console origin: %w", id, err)
		}
	}
	if err := checkPreviewDomain(props.PreviewDomain); err != nil {
		return nil, fmt.Errorf("stack %s: preview domain: %w", id, err)
	}
	if err := checkIssuerURL(props.IssuerURL); err != nil {
		return nil, fmt.Errorf("stack %s: %w", id, err)
	}
	logLevel := props.LogLevel
	if logLevel == "" {
		logLevel = "info"
	}
	stack := awscdk.NewStack(scope, jsii.String(id), &props.StackProps)
	s := &EnvleaseStack{Stack: stack, Functions: map[string]awslambda.Function{}}

	s.Table = newTable(stack)
	accessLogs := newAccessLogBucket(stack)
	s.Bucket = newArtifactBucket(stack, accessLogs)
	s.LinkSecret = newLinkSigner(stack, s.Bucket)
	s.SecretsKey = newSecretsKey(stack)
	s.DLQ = newDeadLetterQueue(stack)
	s.AlarmTopic = newAlarmTopic(stack, props.AlarmEmail)
	s.IdentityKey = newIdentityKey(stack)

	for _, g := range props.Groups {
		s.Functions[g.Name] = s.newFunction(g, props.AssetDirs[g.Name], logLevel, props.PreviewDomain, props.Tracing, props.SAMLocal, !props.NoReservedConcurrency)
	}
	s.Api = s.newHTTPAPI(props.Groups, props.ThrottleRate, props.ThrottleBurst)
	s.NodeSocket = s.newNodeSocket(props.Groups)
	s.wireIdentity(props.Groups, props.IssuerURL)
	for i, w := range props.WorkloadRoles {
		if w.IssuerURL == "" {
			w.IssuerURL = props.IssuerURL
		}
		if _, err := NewWorkloadRole(stack, fmt.Sprintf("WorkloadRole%d", i+1), w); err != nil {
			return nil, fmt.Errorf("stack %s: %w", id, err)
		}
	}
	allowConsole(s.Bucket, s.Api, props.ConsoleOrigins)
	for _, g := range props.Groups {
		if g.IsJob() {
			s.schedule(g)
		}
		if g.WakeOnOutbox {
			s.wakeOnOutbox(g)
		}
	}
	s.alarms(props.Groups)

	awscdk.NewCfnOutput(stack, jsii.String("TableName"), &awscdk.CfnOutputProps{
		Value: s.Table.TableName(), Description: jsii.String("DynamoDB table (TABLE_NAME)")})
	awscdk.NewCfnOutput(stack, jsii.String("BucketName"), &awscdk.CfnOutputProps{
		Value: s.Bucket.BucketName(), Description: jsii.String("artifact bucket (BUCKET_NAME)")})
	awscdk.NewCfnOutput(stack, jsii.String("LinkSignerSecretArn"), &awscdk.CfnOutputProps{
		Value: s.LinkSecret.SecretArn(), Description: jsii.String("secret holding the link signer's access key")})
	awscdk.NewCfnOutput(stack, jsii.String("AlarmTopicArn"), &awscdk.CfnOutputProps{
		Value: s.AlarmTopic.TopicArn(), Description: jsii.String("SNS topic every alarm notifies")})
	return s, nil
}

// newTable renders store.Schema, the same definition local table creation
// uses: string keys, each index projecting what the schema names, TTL on the
// attribute the code writes.
func newTable(stack awscdk.Stack) awsdynamodb.Table {
	sch := store.Schema
	str := func(name string) *awsdynamodb.Attribute {
		return &awsdynamodb.Attribute{Name: jsii.String(name), Type: awsdynamodb.AttributeType_STRING}
	}
	table := awsdynamodb.NewTable(stack, jsii.String("Table"), &awsdynamodb.TableProps{
		PartitionKey: str(sch.PartitionKey),
		SortKey:      str(sch.SortKey),
		BillingMode:  awsdynamodb.BillingMode_PAY_PER_REQUEST,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		TimeToLiveAttribute: jsii.String(sch.TTLAttribute),
		// New items' images feed the delivery job's trigger (trigger.go).
		Stream: tableStreamView,
		// The table is the service's state: it outlives the stack and cannot
		// be deleted by accident (turn protection off by hand to delete it).
		RemovalPolicy:      awscdk.RemovalPolicy_RETAIN,
		DeletionProtection: jsii.Bool(true),
	})
	for _, ix := range sch.Indexes {
		gp := &awsdynamodb.GlobalSecondaryIndexProps{
			IndexName:      jsii.String(ix.Name),
			PartitionKey:   str(ix.PartitionKey),
			SortKey:        str(ix.SortKey),
			ProjectionType: awsdynamodb.ProjectionType(ix.Projection),
		}
		if len(ix.Include) > 0 {
			gp.NonKeyAttributes = jsii.Strings(ix.Include...)
		}
		table.AddGlobalSecondaryIndex(gp)
	}
	return table
}

func newAccessLogBucket(stack awscdk.Stack) awss3.Bucket {
	b := awss3.NewBucket(stack, jsii.String("AccessLogs"), &awss3.BucketProps{
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		EnforceSSL:        jsii.Bool(true),
		// Server access log delivery supports SSE-S3 only.
		Encryption:      awss3.BucketEncryption_S3_MANAGED,
		ObjectOwnership: awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		LifecycleRules: &[]*awss3.LifecycleRule{{
			Id:                                  jsii.String("ExpireAccessLogs"),
			Expiration:                          awscdk.Duration_Days(jsii.Number(90)),
			AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(1)),
		}},
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
	})
	suppress(b, nagRule{"AwsSolutions-S1",
		"This bucket is the target of the artifact bucket's server access logs; logging it into itself would loop and logging it elsewhere only moves the problem.", nil})
	return b
}

// newArtifactBucket: private, TLS only, encrypted at rest, with lifecycle
// backstops. The expiry job deletes artifacts on time; the 400-day rule only
// catches what it might miss, and abandoned multipart uploads go after a day.
func newArtifactBucket(stack awscdk.Stack, logs awss3.Bucket) awss3.Bucket {
	return awss3.NewBucket(stack, jsii.String("ArtifactBucket"), &awss3.BucketProps{
		BlockPublicAccess:      awss3.BlockPublicAccess_BLOCK_ALL(),
		EnforceSSL:             jsii.Bool(true),
		Encryption:             awss3.BucketEncryption_S3_MANAGED,
		ObjectOwnership:        awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		Versioned:              jsii.Bool(false),
		ServerAccessLogsBucket: logs,
		ServerAccessLogsPrefix: jsii.String("artifacts/"),
		LifecycleRules: &[]*awss3.LifecycleRule{
			{
				Id:         jsii.String("ExpireOrgObjectsBackstop"),
				Prefix:     jsii.String(ObjectPrefix),
				Expiration: awscdk.Duration_Days(jsii.Number(400)),
			},
			{
				Id:                                  jsii.String("AbortIncompleteMultipartUploads"),
				AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(1)),
			},
		},
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
	})
}

// allowConsole gives the artifact bucket the CORS rule the web console needs:
// the page uploads and downloads through presigned URLs from the browser,
// which asks the bucket first, and only pages of the console's origins (the
// API's endpoint, where the console is served, and any custom domains) may.
// The rule is added once the API exists: the bucket's functions need the
// bucket, but the API resource itself needs nothing, so there is no cycle.
func allowConsole(bucket awss3.Bucket, api awsapigatewayv2.HttpApi, extra []string) {
	origins := append([]string{*api.ApiEndpoint()}, extra...)
	bucket.AddCorsRule(&awss3.CorsRule{
		AllowedOrigins: jsii.Strings(origins...),
		AllowedMethods: &[]awss3.HttpMethods{awss3.HttpMethods_GET, awss3.HttpMethods_PUT, awss3.HttpMethods_HEAD},
		AllowedHeaders: jsii.Strings("*"),
		ExposedHeaders: jsii.Strings("ETag"),
		MaxAge:         jsii.Number(3600),
	})
}

// checkOrigin accepts what a browser sends as Origin for an HTTPS page:
// https://host or https://host:port, nothing after.
func checkOrigin(o string) error {
	u, err := url.Parse(o)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("%q is not an origin like https://console.example.com", o)
	}
	return nil
}

// linkSignerKeySerial is the generation of the link signer's access key.
// Bump it and redeploy to rotate the key (see newLinkSigner).
const linkSignerKeySerial = 1

// newLinkSigner creates the identity that signs artifact download links.
//
// A presigned URL is valid only while the credentials that signed it are: a
// Lambda role's session credentials last hours, but links may live 7 days.
// So links are signed with a dedicated IAM user's long-term access key whose
// only permission is s3:GetObject on the service's objects.
//
// Trade-off: the access key is created by CloudFormation and its secret is
// written straight into Secrets Manager (it never appears in the template or
// outputs), but CloudFormation does handle it, and it does not rotate by
// itself. Rotate by bumping linkSignerKeySerial and redeploying: a new key is
// created, the secret updated, and the old key deleted, which invalidates
// links signed with it. The serial is part of the signing functions'
// description, so the same deploy replaces their warm instances, which cache
// the key they read.
func newLinkSigner(stack awscdk.Stack, bucket awss3.Bucket) awssecretsmanager.Secret {
	user := awsiam.NewUser(stack, jsii.String("LinkSigner"), nil)
	user.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("ReadServiceObjects"),
		Actions:   jsii.Strings(linkSignerActions...),
		Resources: jsii.Strings(*bucket.ArnForObjects(jsii.String(ObjectPrefix + "*"))),
	}))
	key := awsiam.NewAccessKey(stack, jsii.String("LinkSignerKey"), &awsiam.AccessKeyProps{
		User:   user,
		Serial: jsii.Number(linkSignerKeySerial),
	})
	secret := awssecretsmanager.NewSecret(stack, jsii.String("LinkSignerSecret"), &awssecretsmanager.SecretProps{
		Description: jsii.String("Access key of the IAM user that signs artifact download links (JSON accessKeyId, secretAccessKey)"),
		SecretObjectValue: &map[string]awscdk.SecretValue{
			// An access key id is an identifier, not a secret.
			"accessKeyId":     awscdk.SecretValue_UnsafePlainText(key.AccessKeyId()),
			"secretAccessKey": key.SecretAccessKey(),
		},
	})
	suppressTree(user, nagRule{"AwsSolutions-IAM5",
		"Artifact object keys are generated per organization and artifact; the signer may read any object under the service's own prefix and nothing else.",
		[]string{"Resource::<" + logicalID(bucket) + ".Arn>/" + ObjectPrefix + "*"}})
	suppress(secret, nagRule{"AwsSolutions-SMG4",
		"An IAM access key cannot be rotated by Secrets Manager without a rotation function; it is rotated by bumping linkSignerKeySerial in infra and redeploying (docs/deploy.md, Link signing).", nil})
	return secret
}

// newSecretsKey creates the KMS key that seals organization secrets' data
// keys (docs/secrets.md). Its key policy leaves the key to the account's
// IAM (the CDK default), and the functions' roles get one action each on
// it: the secrets function GenerateDataKey, the nodes function Decrypt. It
// is rotated yearly by KMS (old versions still open what they sealed) and
// retained when the stack goes, as the table that holds what it sealed is.
func newSecretsKey(stack awscdk.Stack) awskms.Key {
	return awskms.NewKey(stack, jsii.String("SecretsKey"), &awskms.KeyProps{
		Description:       jsii.String("envlease: seals the data keys of organization secrets"),
		EnableKeyRotation: jsii.Bool(true),
		RemovalPolicy:     awscdk.RemovalPolicy_RETAIN,
	})
}

// newDeadLetterQueue receives scheduled invocations that failed: events
// EventBridge could not deliver and runs Lambda gave up on.
func newDeadLetterQueue(stack awscdk.Stack) awssqs.Queue {
	q := awssqs.NewQueue(stack, jsii.String("JobsDLQ"), &awssqs.QueueProps{
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
	})
	suppress(q, nagRule{"AwsSolutions-SQS3",
		"This queue is itself the dead-letter queue of the scheduled jobs.", nil})
	return q
}

func newAlarmTopic(stack awscdk.Stack, email string) awssns.Topic {
	t := awssns.NewTopic(stack, jsii.String("Alarms"), &awssns.TopicProps{
		DisplayName: jsii.String("envlease alarms"),
		EnforceSSL:  jsii.Bool(true),
	})
	if email != "" {
		t.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(email), nil))
	}
	suppress(t, nagRule{"AwsSolutions-SNS2",
		"Alarm notifications carry only alarm names and states, and CloudWatch cannot publish to a topic encrypted with the AWS managed SNS key; a customer managed key would add cost without protecting anything sensitive.", nil})
	return t
}

func (s *EnvleaseStack) newFunction(g Group, assetDir, logLevel, previewDomain string, tracing, samLocal, reserve bool) awslambda.Function {
	stack := s.Stack
	id := jsii.String(exportName(g.Name) + "Function")
	logGroup := awslogs.NewLogGroup(stack, jsii.String(exportName(g.Name)+"Logs"), &awslogs.LogGroupProps{
		Retention: awslogs.RetentionDays_ONE_MONTH,
	})
	// One role per function, with no managed policies: only its log group
	// and the data access its group needs (grant below).
	role := awsiam.NewRole(stack, jsii.String(exportName(g.Name)+"Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("envlease " + g.Name + " function"),
	})
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String("WriteOwnLogs"),
		Actions:   jsii.Strings("logs:CreateLogStream", "logs:PutLogEvents"),
		Resources: jsii.Strings(*logGroup.LogGroupArn()),
	}))
	s.grant(role, g)

	env := map[string]*string{
		"TABLE_NAME":  s.Table.TableName(),
		"BUCKET_NAME": s.Bucket.BucketName(),
		"LOG_LEVEL":   jsii.String(logLevel),
	}
	if g.SignsLinks {
		env["LINK_SIGNER_SECRET_ARN"] = s.LinkSecret.SecretArn()
	}
	if g.SecretsKey != SecretsNone {
		env["SECRETS_KEY_ARN"] = s.SecretsKey.KeyArn()
	}
	if g.MakesPreviews && previewDomain != "" {
		env["PREVIEW_DOMAIN"] = jsii.String(previewDomain)
	}
	if g.S3Origin {
		env["S3_ORIGIN"] = jsii.String("https://" + *s.Bucket.BucketRegionalDomainName())
	}
	if samLocal {
		env["AWS_ENDPOINT_URL"] = jsii.String("")
		env["AWS_ENDPOINT_URL_S3"] = jsii.String("")
	}
	desc := "envlease " + g.Name + " - " + g.Description
	if g.SignsLinks {
		desc += fmt.Sprintf(" (link signer key %d)", linkSignerKeySerial)
	}
	fp := &awslambda.FunctionProps{
		Description:   jsii.String(desc),
		Runtime:       awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:  awslambda.Architecture_ARM_64(),
		Handler:       jsii.String("bootstrap"),
		Code:          awslambda.Code_FromAsset(jsii.String(assetDir), nil),
		MemorySize:    jsii.Number(float64(g.MemoryMB)),
		Timeout:       awscdk.Duration_Seconds(jsii.Number(g.Timeout.Seconds())),
		Environment:   &env,
		Role:          role,
		LogGroup:      logGroup,
		LoggingFormat: awslambda.LoggingFormat_JSON,
	}
	if tracing {
		fp.Tracing = awslambda.Tracing_ACTIVE
	}
	if g.ReservedConcurrency > 0 && reserve {
		fp.ReservedConcurrentExecutions = jsii.Number(float64(g.ReservedConcurrency))
	}
	if g.IsJob() {
		// A failed run is not retried by Lambda: the next scheduled run does
		// the same work. It lands in the DLQ (and its alarm) instead.
		fp.RetryAttempts = jsii.Number(0)
		fp.MaxEventAge = awscdk.Duration_Seconds(jsii.Number(g.Schedule.Seconds()))
		fp.DeadLetterQueue = s.DLQ
	}
	fn := awslambda.NewFunction(stack, id, fp)
	if tracing {
		suppressTree(role, nagRule{"AwsSolutions-IAM5",
			"X-Ray's PutTraceSegments and PutTelemetryRecords do not support resource-level permissions.",
			[]string{"Resource::*"}})
	}
	return fn
}

// grant gives a function's role exactly its group's table, bucket and secret
// actions. Table actions cover the table and each index by name (a read-only
// group's authentication writes: the table's auth items only); object
// actions cover the service's prefix; the secret is the one signer secret.
func (s *EnvleaseStack) grant(role awsiam.Role, g Group) {
	resources := []string{*s.Table.TableArn()}
	for _, ix := range store.Schema.Indexes {
		resources = append(resources, *s.Table.TableArn()+"/index/"+ix.Name)
	}
	if len(g.Table.Actions) > 0 {
		role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("Table"),
			Actions:   jsii.Strings(g.Table.Actions...),
			Resources: jsii.Strings(resources...),
		}))
	}
	if g.Table.ReadOnly {
		// The one write a reading function does is authentication's, so it
		// may touch only those items, and only on the table (no index is
		// ever written).
		cond := authWriteCondition()
		role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:        jsii.String("AuthItems"),
			Actions:    jsii.Strings(authWriteActions...),
			Resources:  jsii.Strings(*s.Table.TableArn()),
			Conditions: &cond,
		}))
	}
	if actions := g.Bucket.objectActions(); len(actions) > 0 {
		role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("Objects"),
			Actions:   jsii.Strings(actions...),
			Resources: jsii.Strings(*s.Bucket.ArnForObjects(jsii.String(ObjectPrefix + "*"))),
		}))
		role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("ListServicePrefix"),
			Actions:   jsii.Strings(bucketListActions...),
			Resources: jsii.Strings(*s.Bucket.BucketArn()),
			Conditions: &map[string]interface{}{
				"StringLike": map[string]interface{}{"s3:prefix": []string{ObjectPrefix, ObjectPrefix + "*"}},
			},
		}))
		if actions := g.Bucket.bucketActions(); len(actions) > 0 {
			role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Sid:       jsii.String("BucketUploads"),
				Actions:   jsii.Strings(actions...),
				Resources: jsii.Strings(*s.Bucket.BucketArn()),
			}))
		}
		suppressTree(role, nagRule{"AwsSolutions-IAM5",
			"Object keys are generated per organization and artifact; access is limited to the service's own prefix.",
			[]string{"Resource::<" + logicalID(s.Bucket) + ".Arn>/" + ObjectPrefix + "*"}})
	}
	if actions := g.SecretsKey.actions(); len(actions) > 0 {
		// Only with the encryption context the secrets service gives every
		// data key: an organization and a secret's name.
		role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("SecretsKey"),
			Actions:   jsii.Strings(actions...),
			Resources: jsii.Strings(*s.SecretsKey.KeyArn()),
			Conditions: &map[string]interface{}{
				"ForAllValues:StringEquals": map[string]interface{}{"kms:EncryptionContextKeys": []string{"envlease:org", "envlease:secret"}},
				"Null":                      map[string]interface{}{"kms:EncryptionContextKeys": "false"},
			},
		}))
	}
	if g.SignsLinks {
		role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("LinkSignerSecret"),
			Actions:   jsii.Strings(secretReadActions...),
			Resources: jsii.Strings(*s.LinkSecret.SecretArn()),
		}))
	}
}

func (s *EnvleaseStack) newHTTPAPI(groups []Group, rate, burst float64) awsapigatewayv2.HttpApi {
	stack := s.Stack
	integrations := map[string]awsapigatewayv2integrations.HttpLambdaIntegration{}
	integration := func(name string) awsapigatewayv2integrations.HttpLambdaIntegration {
		if in, ok := integrations[name]; ok {
			return in
		}
		in := awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String(exportName(name)+"Integration"),
			s.Functions[name], &awsapigatewayv2integrations.HttpLambdaIntegrationProps{
				PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
			})
		integrations[name] = in
		return in
	}
	props := &awsapigatewayv2.HttpApiProps{
		ApiName:            jsii.String(*stack.StackName() + "-api"),
		Description:        jsii.String("envlease HTTPS API"),
		CreateDefaultStage: jsii.Bool(false),
	}
	for _, g := range groups {
		if g.CatchAll {
			props.DefaultIntegration = integration(g.Name)
		}
	}
	api := awsapigatewayv2.NewHttpApi(stack, jsii.String("Api"), props)
	for _, g := range groups {
		for _, r := range g.Routes {
			paths := []string{r.Path}
			if r.Proxy {
				paths = append(paths, r.Path+"/{proxy+}")
			}
			for _, p := range paths {
				api.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
					Path:        jsii.String(p),
					Methods:     &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod_ANY},
					Integration: integration(g.Name),
				})
			}
		}
	}

	if rate <= 0 {
		rate = 100
	}
	if burst <= 0 {
		burst = 200
	}
	// Groups with their own limit get it on each of their routes.
	routeSettings := map[string]interface{}{}
	for _, g := range groups {
		if g.Throttle == nil {
			continue
		}
		for _, r := range g.Routes {
			keys := []string{"ANY " + r.Path}
			if r.Proxy {
				keys = append(keys, "ANY "+r.Path+"/{proxy+}")
			}
			for _, k := range keys {
				routeSettings[k] = map[string]interface{}{
					"ThrottlingRateLimit":  g.Throttle.Rate,
					"ThrottlingBurstLimit": g.Throttle.Burst,
				}
			}
		}
	}
	accessLogs := awslogs.NewLogGroup(stack, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		Retention: awslogs.RetentionDays_ONE_MONTH,
	})
	stage := api.AddStage(jsii.String("DefaultStage"), &awsapigatewayv2.HttpStageOptions{
		StageName:  jsii.String("$default"),
		AutoDeploy: jsii.Bool(true),
		Throttle: &awsapigatewayv2.ThrottleSettings{
			RateLimit:  jsii.Number(rate),
			BurstLimit: jsii.Number(burst),
		},
	})
	cfnStage := stage.Node().DefaultChild().(awsapigatewayv2.CfnStage)
	if len(routeSettings) > 0 {
		cfnStage.SetRouteSettings(routeSettings)
		// A route's settings need the route to exist first.
		for _, child := range *api.Node().Children() {
			if res, ok := child.Node().DefaultChild().(awscdk.CfnResource); ok && *res.CfnResourceType() == "AWS::ApiGatewayV2::Route" {
				cfnStage.Node().AddDependency(child)
			}
		}
	}
	cfnStage.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: accessLogs.LogGroupArn(),
		Format:         jsii.String(accessLogFormat),
	})
	// Authentication is the service's own bearer tokens, checked in every
	// function by the shared middleware (spec section 5); an API Gateway
	// authorizer would only repeat that lookup.
	for _, child := range *api.Node().Children() {
		if res, ok := child.Node().DefaultChild().(awscdk.CfnResource); ok && *res.CfnResourceType() == "AWS::ApiGatewayV2::Route" {
			suppress(child, nagRule{"AwsSolutions-APIG4",
				"Clients authenticate with the service's own bearer tokens, which the shared auth middleware in each function hashes and looks up in the table, with per-address lockout (spec section 5); an API Gateway authorizer would repeat that lookup on every request. The API description, the catch-all 404 and the web console's static files are public by design.", nil})
		}
	}

	awscdk.NewCfnOutput(stack, jsii.String("ApiUrl"), &awscdk.CfnOutputProps{
		// The API's own endpoint attribute (not a URL assembled from the
		// region) so the output is right wherever the stack is deployed.
		Value:       jsii.String(*api.ApiEndpoint() + "/"),
		Description: jsii.String("base URL of the API"),
	})
	return api
}

// schedule runs a job on its rate, with EventBridge retries and the DLQ for
// events it cannot deliver.
func (s *EnvleaseStack) schedule(g Group) {
	rule := awsevents.NewRule(s.Stack, jsii.String(exportName(g.Name)+"Schedule"), &awsevents.RuleProps{
		Description: jsii.String(fmt.Sprintf("runs the %s job every %s", g.Name, rateText(g.Schedule))),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(g.Schedule.Minutes()))),
	})
	rule.AddTarget(awseventstargets.NewLambdaFunction(s.Functions[g.Name], &awseventstargets.LambdaFunctionProps{
		DeadLetterQueue: s.DLQ,
		RetryAttempts:   jsii.Number(2),
		MaxEventAge:     awscdk.Duration_Seconds(jsii.Number(g.Schedule.Seconds())),
	}))
}

func rateText(d time.Duration) string {
	if m := int(d.Minutes()); m == 1 {
		return "minute"
	} else {
		return fmt.Sprintf("%d minutes", m)
	}
}

// alarms: errors and throttles of every function, and anything in the DLQ.
// All notify the alarm topic.
func (s *EnvleaseStack) alarms(groups []Group) {
	action := awscloudwatchactions.NewSnsAction(s.AlarmTopic)
	period := awscdk.Duration_Minutes(jsii.Number(5))
	add := func(id string, metric awscloudwatch.Metric, threshold float64, desc string) {
		a := metric.CreateAlarm(s.Stack, jsii.String(id), &awscloudwatch.CreateAlarmOptions{
			AlarmDescription:   jsii.String(desc),
			Threshold:          jsii.Number(threshold),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		a.AddAlarmAction(action)
	}
	names := GroupNames(groups)
	sort.Strings(names)
	for _, n := range names {
		fn := s.Functions[n]
		sum := &awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")}
		add(exportName(n)+"Errors", fn.MetricErrors(sum), 1, "envlease "+n+": function errors in the last 5 minutes")
		add(exportName(n)+"Throttles", fn.MetricThrottles(sum), 1, "envlease "+n+": throttled invocations in the last 5 minutes")
	}
	add("JobsDLQMessages", s.DLQ.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
		Period: period, Statistic: jsii.String("Maximum")}), 1,
		"envlease: failed scheduled invocations are waiting in the dead-letter queue")
	add("Api5xx", s.Api.MetricServerError(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")}), 5,
		"envlease: the HTTP API answered 5xx at least 5 times in 5 minutes")
}

// exportName turns a group name into a construct id: "tokens" -> "Tokens".
func exportName(name string) string {
	if name == "" {
		return name
	}
	return strings.ToUpper(name[:1]) + name[1:]
}

// previewLabel is one label of a preview domain: a DNS label, or the
// node's name ({node}) in place of one.
var previewLabel = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?|\{node\})$`)

// checkPreviewDomain refuses a preview domain that is not a host name (a
// scheme, a port, a path or an upper-case letter are mistakes in it).
func checkPreviewDomain(d string) error {
	if d == "" {
		return nil
	}
	labels := strings.Split(d, ".")
	if len(labels) < 2 || len(d) > 200 {
		return fmt.Errorf("%q is not a domain such as preview.example.com", d)
	}
	for _, l := range labels {
		if !previewLabel.MatchString(l) {
			return fmt.Errorf("%q is not a domain such as preview.example.com (label %q)", d, l)
		}
	}
	return nil
}
