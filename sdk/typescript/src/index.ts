// @envlease/sdk: the TypeScript SDK of envlease (docs/sdk.md).
export { Envlease, type EnvleaseOptions, type CreateOptions, type LeaseRequest, type EnvironmentRecord, type Template } from "./client.js";
export { Environment, type Preview, type PreviewOptions, type Checkpoint, type CheckpointOptions, type ForkOptions } from "./environment.js";
export { Process, type ExecOptions, type ExecResult, type SpawnOptions, type Signal } from "./exec.js";
export type { LogOptions } from "./logs.js";
export { Files, FileError, type FileInfo, type FileList, type FileChange } from "./files.js";
export { Artifacts, type Artifact, type Link, type UploadOptions } from "./artifacts.js";
export { verifyWebhook, signWebhook, type VerifyOptions } from "./webhooks.js";
export { EnvleaseError, EnvironmentFailedError, ExecError, WebhookSignatureError, type ErrorCode } from "./errors.js";
export type { WebSocketConstructor } from "./socket.js";
export type { paths, components, operations } from "./openapi.js";
