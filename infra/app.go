package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

// StackName is the CloudFormation stack (and cdk.out/<StackName>.template.json).
const StackName = "Envlease"

// Context keys this app reads (cdk.json "context", or -c key=value).
const (
	ctxLogLevel      = "envlease:logLevel"
	ctxTracing       = "envlease:tracing"
	ctxThrottleRate  = "envlease:throttleRateLimit"
	ctxThrottleBurst = "envlease:throttleBurstLimit"
	// ctxReserved=false leaves out the functions' reserved concurrency.
	ctxReserved   = "envlease:reservedConcurrency"
	ctxAlarmEmail = "envlease:alarmEmail"
	ctxSAMLocal   = "envlease:samLocal"
	// Further origins of the web console (custom domains of the API),
	// comma separated or a list: the artifact bucket's CORS rule allows them
	// besides the API's own endpoint.
	ctxConsoleOrigins = "envlease:consoleOrigins"
	// The domain preview links are named under (docs/previews.md).
	ctxPreviewDomain = "envlease:previewDomain"
	// The environments' OIDC issuer, https://... (docs/identity.md); the
	// API's own endpoint when absent.
	ctxIssuerURL = "envlease:issuerUrl"
	// Subjects (org:<org>:template:<t>:project:<p>, comma separated or a
	// list) each given a role that trusts the issuer (NewWorkloadRole).
	ctxWorkloadRoles = "envlease:workloadRoles"
	// SAM finds each function's code through aws:asset:path metadata, which
	// CDK writes only with this context set. The CDK CLI sets it (and
	// reserves aws: keys in cdk.json); newApp sets it for direct runs.
	ctxAssetMetadata = "aws:cdk:enable-asset-metadata"
	// aws:cdk:path on every resource lets sam local name a function by its
	// construct path (Envlease/TokensFunction). The CLI sets it too.
	ctxPathMetadata = "aws:cdk:enable-path-metadata"
)

// appOptions say how to build the app; main and the tests both use newApp.
type appOptions struct {
	// Root is the repository root (cdk.json lives there).
	Root string
	// Outdir is the cloud assembly folder; empty means CDK_OUTDIR (set by
	// the CDK CLI) or <Root>/cdk.out.
	Outdir string
	Groups []Group
	// AssetDirs maps group names to built bootstrap folders.
	AssetDirs map[string]string
	// NagReports writes cdk-nag's CSV reports into the assembly.
	NagReports bool
	// Context overrides cdk.json's context (main's flags).
	Context map[string]interface{}
}

// newApp builds the app with cdk.json's context (so a direct `go run ./infra`
// synthesizes exactly what the CDK CLI would), the stack, and cdk-nag.
func newApp(opts appOptions) (awscdk.App, *EnvleaseStack, error) {
	ctx, err := readCDKContext(filepath.Join(opts.Root, "cdk.json"))
	if err != nil {
		return nil, nil, err
	}
	for _, k := range []string{ctxAssetMetadata, ctxPathMetadata} {
		if _, ok := ctx[k]; !ok {
			ctx[k] = true
		}
	}
	for k, v := range opts.Context {
		ctx[k] = v
	}
	outdir := opts.Outdir
	if outdir == "" {
		outdir = os.Getenv("CDK_OUTDIR")
	}
	if outdir == "" {
		outdir = filepath.Join(opts.Root, "cdk.out")
	}
	app := awscdk.NewApp(&awscdk.AppProps{
		Outdir:  jsii.String(outdir),
		Context: &ctx,
	})

	props := &EnvleaseStackProps{
		StackProps: awscdk.StackProps{
			Description: jsii.String("envlease: environment leasing service (HTTP API, Lambda, DynamoDB, S3)"),
		},
		Groups:        opts.Groups,
		AssetDirs:     opts.AssetDirs,
		LogLevel:      contextString(app, ctxLogLevel, "info"),
		AlarmEmail:    contextString(app, ctxAlarmEmail, ""),
		PreviewDomain: contextString(app, ctxPreviewDomain, ""),
		IssuerURL:     contextString(app, ctxIssuerURL, ""),
	}
	subjects, err := contextStrings(app, ctxWorkloadRoles)
	if err != nil {
		return nil, nil, err
	}
	for _, sub := range subjects {
		props.WorkloadRoles = append(props.WorkloadRoles, WorkloadRoleProps{Subject: sub})
	}
	if props.ConsoleOrigins, err = contextStrings(app, ctxConsoleOrigins); err != nil {
		return nil, nil, err
	}
	if props.Tracing, err = contextBool(app, ctxTracing, false); err != nil {
		return nil, nil, err
	}
	if props.SAMLocal, err = contextBool(app, ctxSAMLocal, false); err != nil {
		return nil, nil, err
	}
	if props.ThrottleRate, err = contextNumber(app, ctxThrottleRate, 500); err != nil {
		return nil, nil, err
	}
	if props.ThrottleBurst, err = contextNumber(app, ctxThrottleBurst, 1000); err != nil {
		return nil, nil, err
	}
	reserve, err := contextBool(app, ctxReserved, true)
	if err != nil {
		return nil, nil, err
	}
	props.NoReservedConcurrency = !reserve
	stack, err := NewEnvleaseStack(app, StackName, props)
	if err != nil {
		return nil, nil, err
	}
	addNagChecks(app, opts.NagReports)
	return app, stack, nil
}

func readCDKContext(path string) (map[string]interface{}, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Base(path), err)
	}
	var cfg struct {
		Context map[string]interface{} `json:"context"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Base(path), err)
	}
	if cfg.Context == nil {
		cfg.Context = map[string]interface{}{}
	}
	return cfg.Context, nil
}

func contextValue(app awscdk.App, key string) interface{} {
	return app.Node().TryGetContext(jsii.String(key))
}

func contextString(app awscdk.App, key, def string) string {
	switch v := contextValue(app, key).(type) {
	case string:
		if v != "" {
			return v
		}
	case *string:
		if v != nil && *v != "" {
			return *v
		}
	}
	return def
}

// contextStrings reads a list: a JSON array of strings (cdk.json) or a comma
// separated string (-c key=a,b).
func contextStrings(app awscdk.App, key string) ([]string, error) {
	var parts []string
	switch v := contextValue(app, key).(type) {
	case nil:
		return nil, nil
	case string:
		parts = strings.Split(v, ",")
	case *string:
		parts = strings.Split(*v, ",")
	case []interface{}:
		for _, x := range v {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("context %s: want strings, got %v", key, x)
			}
			parts = append(parts, s)
		}
	default:
		return nil, fmt.Errorf("context %s: want a list of strings, got %v", key, v)
	}
	var out []string
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out, nil
}

func contextBool(app awscdk.App, key string, def bool) (bool, error) {
	switch v := contextValue(app, key).(type) {
	case nil:
		return def, nil
	case bool:
		return v, nil
	case *bool:
		return *v, nil
	case string:
		return strconv.ParseBool(v)
	case *string:
		return strconv.ParseBool(*v)
	default:
		return false, fmt.Errorf("context %s: want true or false, got %v", key, v)
	}
}

func contextNumber(app awscdk.App, key string, def float64) (float64, error) {
	switch v := contextValue(app, key).(type) {
	case nil:
		return def, nil
	case float64:
		return v, nil
	case *float64:
		return *v, nil
	case string:
		return strconv.ParseFloat(v, 64)
	case *string:
		return strconv.ParseFloat(*v, 64)
	default:
		return 0, fmt.Errorf("context %s: want a number, got %v", key, v)
	}
}
