package main

import "github.com/envlease/envlease/shared/store"

// The IAM actions functions may be granted. Resources are always the table (and its
// indexes by name), the bucket's object prefix, or the one secret: never "*".

// ObjectPrefix is where every object of the service lives (orgs/<org>/...).
// Object permissions and the lifecycle backstop are scoped to it.
const ObjectPrefix = "orgs/"

// The table actions a function may be granted (groups.go grants each
// function the ones it calls). A transaction is authorized per item: its
// Put, Update, Delete and ConditionCheck need PutItem, UpdateItem,
// DeleteItem and ConditionCheckItem. Not among them: DescribeTable (only
// local table creation describes), BatchWriteItem (only seeding and imports,
// store.PutEnvironments, batch writes, with an operator's credentials), Scan
// and PartiQL (nothing calls them); TestLambdaRuntime fails if a function
// starts to.
const (
	getItem            = "dynamodb:GetItem"
	batchGetItem       = "dynamodb:BatchGetItem"
	query              = "dynamodb:Query"
	conditionCheckItem = "dynamodb:ConditionCheckItem"
	putItem            = "dynamodb:PutItem"
	updateItem         = "dynamodb:UpdateItem"
	deleteItem         = "dynamodb:DeleteItem"
)

var (
	// authActions: the shared auth middleware of every HTTP function reads
	// a key and its owner in one BatchGetItem, and updates the key's
	// lastUsed (at most once a minute) and the per-address failed-attempt
	// counter, single UpdateItem calls. A read-only function's UpdateItem
	// is confined to those items by authWriteCondition.
	authReadActions  = []string{batchGetItem}
	authWriteActions = []string{updateItem}
	authActions      = concat(authReadActions, authWriteActions)

	// Presigned uploads and parts are signed with the function's own role
	// (they live minutes, not days): PutObject covers PutObject,
	// CreateMultipartUpload, UploadPart and CompleteMultipartUpload; sealing
	// reads checksums with HeadObject (GetObject) and ListParts; an
	// abandoned or mismatched upload is aborted or deleted.
	artifactObjectActions = []string{
		"s3:PutObject",
		"s3:GetObject",
		"s3:DeleteObject",
		"s3:AbortMultipartUpload",
		"s3:ListMultipartUploadParts",
	}
	// Expiry lists an artifact's folder, deletes what is in it, and aborts
	// any upload left unfinished under it.
	expiryObjectActions = []string{
		"s3:DeleteObject",
		"s3:AbortMultipartUpload",
	}
	// ListBucket, limited to ObjectPrefix by an s3:prefix condition, makes a
	// missing object a 404 rather than a 403 and lets expiry list a folder.
	bucketListActions = []string{
		"s3:ListBucket",
	}
	// ListMultipartUploads has no s3:prefix condition key, so it is granted
	// on the bucket alone; it reveals only keys and upload ids.
	expiryBucketActions = []string{
		"s3:ListBucketMultipartUploads",
	}

	// A function woken by the table's stream (Group.WakeOnOutbox) reads it
	// through its event source mapping: the first three on the stream's ARN;
	// ListStreams has no resource-level permission, so it is on "*" in a
	// statement of its own (it lists stream ARNs, never an item).
	streamReadActions = []string{
		"dynamodb:DescribeStream",
		"dynamodb:GetRecords",
		"dynamodb:GetShardIterator",
	}
	streamListActions = []string{
		"dynamodb:ListStreams",
	}

	// The link signer's only permission.
	linkSignerActions = []string{
		"s3:GetObject",
	}
	secretReadActions = []string{
		"secretsmanager:GetSecretValue",
	}

	// The secrets key (SecretsKeyUse): setting a secret makes a data key,
	// a node's fetch opens one; no function does both, none encrypts or
	// decrypts anything else with it (the encryption context must name an
	// organization and a secret).
	secretsSealActions = []string{
		"kms:GenerateDataKey",
	}
	secretsOpenActions = []string{
		"kms:Decrypt",
	}
)

// authWriteCondition limits a read-only group's authWriteActions to the items
// authentication writes (store.AuthWritePrefixes): every partition key the
// request touches must have one of those prefixes. LeadingKeys is always
// present on an UpdateItem; the Null test keeps a request without it (for
// which ForAllValues would hold vacuously) from passing.
func authWriteCondition() map[string]interface{} {
	patterns := make([]string, len(store.AuthWritePrefixes))
	for i, p := range store.AuthWritePrefixes {
		patterns[i] = p + "*"
	}
	return map[string]interface{}{
		"ForAllValues:StringLike": map[string]interface{}{"dynamodb:LeadingKeys": patterns},
		"Null":                    map[string]interface{}{"dynamodb:LeadingKeys": "false"},
	}
}

// actions are every table action of the function, conditioned or not.
func (a TableAccess) actions() []string {
	if a.ReadOnly {
		return concat(a.Actions, authWriteActions)
	}
	return a.Actions
}

// bucketActions are granted on the bucket itself without a condition
// (bucketListActions, with its prefix condition, go to every BucketAccess).
func (a BucketAccess) bucketActions() []string {
	if a == BucketDelete {
		return expiryBucketActions
	}
	return nil
}

func (a BucketAccess) objectActions() []string {
	switch a {
	case BucketArtifacts:
		return artifactObjectActions
	case BucketDelete:
		return expiryObjectActions
	}
	return nil
}

func concat(lists ...[]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, l := range lists {
		for _, s := range l {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}
