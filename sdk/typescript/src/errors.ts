import type { components } from "./openapi.js";

type Schemas = components["schemas"];

/**
 * Every error code the API answers with: the union of the `code` enums of
 * the OpenAPI description's Error schemas, so a new code there is a new
 * member here once the types are regenerated.
 */
export type ErrorCode = {
  [K in keyof Schemas]: K extends `Error${string}` ? (Schemas[K] extends { code: infer C } ? C : never) : never;
}[keyof Schemas];

/**
 * An answer of the API other than success: `code` is the API's (see
 * docs/api.md, errors), `status` the HTTP status, `message` the API's
 * sentence for people. `field` names the request field at fault, when the
 * API named one; `retryAfter` is the seconds a 429 or 503 asked to wait.
 */
export class EnvleaseError extends Error {
  override readonly name: string = "EnvleaseError";
  constructor(
    message: string,
    readonly code: ErrorCode,
    readonly status: number,
    readonly field?: string,
    readonly requestId?: string,
    readonly retryAfter?: number,
  ) {
    super(message);
  }
}

/** Raised by create() when the environment ended before it was ready. */
export class EnvironmentFailedError extends Error {
  override readonly name = "EnvironmentFailedError";
  constructor(
    readonly environment: Schemas["Environment"],
  ) {
    super(`environment ${environment.id} is ${environment.state}${environment.error ? ": " + environment.error : ""}`);
  }
}

/** The node refused to run a command, or the connection to it ended first. */
export class ExecError extends Error {
  override readonly name = "ExecError";
}

/** A webhook delivery whose signature does not check, or that is too old. */
export class WebhookSignatureError extends Error {
  override readonly name = "WebhookSignatureError";
}

/** errorFrom reads an API error answer into an EnvleaseError. */
export async function errorFrom(res: Response, body?: unknown): Promise<EnvleaseError> {
  if (body === undefined) {
    try {
      body = await res.json();
    } catch {
      body = undefined;
    }
  }
  const b = (body ?? {}) as { error?: string; code?: string; field?: string };
  const retry = Number(res.headers.get("Retry-After"));
  return new EnvleaseError(
    b.error || `${res.status} ${res.statusText}`,
    (b.code || (res.status >= 500 ? "internal" : "bad_request")) as ErrorCode,
    res.status,
    b.field,
    res.headers.get("X-Request-Id") ?? undefined,
    Number.isFinite(retry) && retry > 0 ? retry : undefined,
  );
}
