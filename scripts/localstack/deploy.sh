#!/usr/bin/env bash
# Deploys the Envlease stack to LocalStack with the plain CDK CLI. The CLI and
# the AWS SDKs reach LocalStack through their own endpoint settings
# (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3): no wrapper, no code changes.
#
#   scripts/localstack/deploy.sh            # bootstrap (once) and deploy
#   scripts/localstack/deploy.sh destroy    # delete the stack (retained resources stay)
#
# Environment:
#   AWS_ENDPOINT_URL     LocalStack's endpoint (default http://localhost:4566)
#   AWS_ENDPOINT_URL_S3  S3 endpoint for virtual-hosted buckets
#                        (default http://s3.localhost.localstack.cloud:<port> for a local endpoint)
#   AWS_REGION           region (default us-east-1)
#
# Needs Node.js and npm (for npx), Go, and a running LocalStack whose edition
# emulates API Gateway v2 (HTTP APIs).
set -euo pipefail

CDK_VERSION=2.1148.1 # the CDK CLI, pinned; it must be at least as new as aws-cdk-go in go.mod
STACK=Envlease
ACCOUNT=000000000000 # LocalStack's default account

cd "$(dirname "$0")/../.."

export AWS_ENDPOINT_URL="${AWS_ENDPOINT_URL:-http://localhost:4566}"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_DEFAULT_REGION="$AWS_REGION"
# LocalStack accepts any credentials. Fixed dummy ones make sure nothing here
# can act on a real account, whatever the shell had.
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_DEFAULT_PROFILE
export CDK_DISABLE_CLI_TELEMETRY=true

hostport="${AWS_ENDPOINT_URL#*://}"
hostport="${hostport%%/*}"
host="${hostport%%:*}"
port="${hostport##*:}"
[ "$port" = "$hostport" ] && port=4566
if [ -z "${AWS_ENDPOINT_URL_S3:-}" ]; then
  case "$host" in
    localhost | 127.0.0.1 | localhost.localstack.cloud)
      # Asset uploads address buckets by virtual host (bucket.s3...);
      # LocalStack's domain resolves every such name to the loopback address.
      export AWS_ENDPOINT_URL_S3="http://s3.localhost.localstack.cloud:$port" ;;
    *)
      echo "deploy: set AWS_ENDPOINT_URL_S3 for $AWS_ENDPOINT_URL (virtual-hosted S3, e.g. http://s3.<domain>:$port)" >&2
      exit 2 ;;
  esac
fi

for tool in curl node npx go; do
  command -v "$tool" >/dev/null || { echo "deploy: $tool is required" >&2; exit 2; }
done

if ! health="$(curl -fsS --max-time 5 "$AWS_ENDPOINT_URL/_localstack/health" 2>/dev/null)"; then
  cat >&2 <<EOF
deploy: LocalStack is not reachable at $AWS_ENDPOINT_URL.
Start it first (for example: localstack start -d, or its Docker image with port 4566 published),
or point AWS_ENDPOINT_URL at where it runs.
EOF
  exit 1
fi

# The HTTP API needs API Gateway v2, which not every LocalStack edition has.
missing="$(printf '%s' "$health" | node -e '
  let s = ""; process.stdin.on("data", d => s += d).on("end", () => {
    const svc = (JSON.parse(s).services) || {};
    const need = ["apigatewayv2", "cloudformation", "dynamodb", "events", "iam", "lambda",
                  "logs", "s3", "secretsmanager", "sns", "sqs", "ssm", "sts", "cloudwatch"];
    console.log(need.filter(n => !svc[n] || svc[n] === "disabled").join(" "));
  });')"
if [ -n "$missing" ]; then
  echo "deploy: LocalStack at $AWS_ENDPOINT_URL does not offer: $missing" >&2
  echo "deploy: the stack needs all of them (API Gateway v2 comes with LocalStack's paid editions)." >&2
  exit 1
fi

cdk() { npx --yes "aws-cdk@$CDK_VERSION" --no-notices "$@"; }

if [ "${1:-deploy}" = destroy ]; then
  cdk destroy "$STACK" --force
  echo "Stack deleted. The table and the buckets are retained by design; delete them with the AWS CLI if you want a clean LocalStack."
  exit 0
fi

echo "Bootstrapping aws://$ACCOUNT/$AWS_REGION on LocalStack (idempotent)…"
cdk bootstrap "aws://$ACCOUNT/$AWS_REGION"

echo "Deploying $STACK to LocalStack…"
mkdir -p cdk.out
cdk deploy "$STACK" --require-approval never --outputs-file cdk.out/localstack-outputs.json

node -e '
  const o = require("./cdk.out/localstack-outputs.json")["'"$STACK"'"] || {};
  console.log("\nApiUrl     " + o.ApiUrl + "\nTableName  " + o.TableName + "\nBucketName " + o.BucketName);
  console.log("\nFirst admin token (same endpoint settings):");
  console.log("  AWS_ENDPOINT_URL=" + process.env.AWS_ENDPOINT_URL + " AWS_REGION=" + process.env.AWS_REGION +
    " AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test TABLE_NAME=" + o.TableName +
    " go run ./scripts/admin bootstrap --org acme --user alice");
'
