// Package platform reads configuration from the environment and builds the
// AWS clients and the logger. Endpoints (LocalStack, the local stack) come
// from the SDK's own settings, AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE>,
// so there is no code path that differs between AWS and elsewhere.
package platform

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
)

// Config is the process configuration.
type Config struct {
	// Table is the DynamoDB table (TABLE_NAME).
	Table string
	// Bucket is the artifacts bucket (BUCKET_NAME).
	Bucket string
	// LinkSignerSecretARN names the Secrets Manager secret with the key that
	// signs artifact links (LINK_SIGNER_SECRET_ARN); empty means the function's
	// own credentials sign.
	LinkSignerSecretARN string
	// LogLevel is debug, info, warn or error (LOG_LEVEL).
	LogLevel string
	// SocketEndpoint is the node protocol WebSocket stage's management
	// endpoint (NODE_SOCKET_ENDPOINT, https://...): where offers to nodes are
	// posted. Empty: no node is woken; nodes find work by claiming.
	SocketEndpoint string
	// SocketURL is the URL nodes open the node protocol's WebSocket at
	// (NODE_SOCKET_URL, wss://...), which registration tells them.
	SocketURL string
	// SecretsKeyARN is the KMS key that seals organization secrets' data
	// keys (SECRETS_KEY_ARN): set for the secrets function (which makes
	// data keys) and the nodes function (which opens them for nodes).
	SecretsKeyARN string
}

// LoadConfig reads the configuration from the environment.
func LoadConfig() (Config, error) {
	c := Config{
		Table:               os.Getenv("TABLE_NAME"),
		Bucket:              os.Getenv("BUCKET_NAME"),
		LinkSignerSecretARN: os.Getenv("LINK_SIGNER_SECRET_ARN"),
		LogLevel:            os.Getenv("LOG_LEVEL"),
		SocketEndpoint:      os.Getenv("NODE_SOCKET_ENDPOINT"),
		SocketURL:           os.Getenv("NODE_SOCKET_URL"),
		SecretsKeyARN:       os.Getenv("SECRETS_KEY_ARN"),
	}
	if c.Table == "" {
		return c, fmt.Errorf("TABLE_NAME is not set")
	}
	return c, nil
}

// Logger returns a JSON slog logger at the configured level.
func Logger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// AWSConfig loads the SDK configuration the standard way (environment, shared
// files, the Lambda role).
func AWSConfig(ctx context.Context) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	return cfg, nil
}

// Fatal logs err and exits: for main functions that cannot start.
func Fatal(log *slog.Logger, msg string, err error) {
	log.Error(msg, "err", err)
	os.Exit(1)
}

// Runtime is what every function's main builds first: its configuration, its
// JSON logger and the AWS SDK configuration.
type Runtime struct {
	Config Config
	Log    *slog.Logger
	AWS    aws.Config
}

// Boot builds the Runtime from the environment, or exits: a function that
// cannot read its configuration has nothing to serve, and the error is logged
// as JSON where the platform collects it.
func Boot(ctx context.Context) Runtime {
	cfg, err := LoadConfig()
	log := Logger(os.Stdout, cfg.LogLevel)
	if err != nil {
		Fatal(log, "configuration", err)
	}
	awsCfg, err := AWSConfig(ctx)
	if err != nil {
		Fatal(log, "aws", err)
	}
	return Runtime{Config: cfg, Log: log, AWS: awsCfg}
}

// RequireBucket exits unless BUCKET_NAME is set; why says what needs it.
func (r Runtime) RequireBucket(why string) {
	if r.Config.Bucket == "" {
		Fatal(r.Log, "configuration", fmt.Errorf("BUCKET_NAME is not set: %s", why))
	}
}
