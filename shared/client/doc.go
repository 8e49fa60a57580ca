// Package client is the typed Go client of the envlease API, for programs and
// scripts that lease environments, move artifacts and watch events; the
// envlease command is built on it. It covers every endpoint a person or a
// script uses (the node API is the agent's), the transfers of artifact bytes
// to and from object storage through presigned URLs ([Client.Push],
// [Client.Pull]), and the tickets of tunnels to an environment's exports
// ([Client.CreateTunnel]; package tunnel forwards connections with them).
// Response shapes are the service's own types from package domain.
//
// # Authentication
//
// [New] takes the API's base URL (a deployed HTTP API's URL with its stage
// path, or http://127.0.0.1:8080 for the dev server) and a bearer token, sent
// as "Authorization: Bearer <token>" with every API call. The token is a CLI
// token (els_cli_…, acting as its person, as [Client.CreateToken] issues
// them) or an organization API key (els_org_…, member rights, as
// [Client.CreateKey] issues them to admins). Presigned transfers carry
// no token: their URLs are their own credential.
//
// The client reads no environment variables and no configuration file. A
// program that follows the envlease command's conventions reads ENVLEASE_URL
// and ENVLEASE_TOKEN itself, as the examples do:
//
//	c, err := client.New(os.Getenv("ENVLEASE_URL"), os.Getenv("ENVLEASE_TOKEN"))
//
// # Errors
//
// A call the API refuses returns an [*Error]: the HTTP status, the API's
// machine-readable Code, its Message, the Field at fault where the API names
// one, and the RequestID the service logged the call under, which its text
// quotes so a failure can be found in the service's logs. [AsError],
// [StatusOf] and [CodeOf] find it in a chain of wrapped errors. Each status
// has one code:
//
//	400 bad_request    401 unauthorized   403 forbidden     404 not_found
//	405 method_not_allowed                409 conflict      410 gone
//	413 too_large      422 invalid        429 quota or locked
//	500 internal       503 unavailable (with Retry-After)
//
// An answer that is not the API's own (a gateway's or a proxy's) is an
// [*Error] with an empty Code. A presigned transfer that object storage
// refuses returns a [*TransferError], which names the storage's host but not
// the URL, and a pulled artifact whose bytes do not match its record wraps
// [ErrChecksum]. A network failure or an ended context returns as
// net/http and package context report it.
//
// # Retries
//
// A call that is safe to repeat is sent again after a 502 or 503: every GET
// and DELETE, the POSTs that store nothing (CreateLink, RenewUpload,
// CreateTunnel, TouchEnvironment, RetryDelivery), and a Lease with an
// IdempotencyKey, which the service answers with the first answer. Any other
// POST (a Lease without a key, CreateArtifact, CompleteArtifact, CreateToken,
// …) may have taken effect before its answer was lost, so it is never
// repeated. A retry waits for the server's Retry-After, or 1 s, 2 s, 4 s
// without one; a request is sent [DefaultMaxAttempts] (4) times at most, and
// a wait longer than [DefaultMaxRetryWait] (30 s) is not waited for: the
// error is returned at once. 429 (quota, locked) and 500 are never retried.
// An ended context stops the wait and is returned. [WithMaxAttempts],
// [WithMaxRetryWait] and [WithSleep] change the policy. Presigned transfers (UploadPart, Download,
// and so Push and Pull) retry object storage's 500, 502 and 503 and a
// connection that failed before any byte of a download arrived, with the same
// backoff.
//
// The default HTTP client has no overall timeout, since transfers of large
// artifacts take long: bound a call with its context. A Client is safe for
// concurrent use.
package client
