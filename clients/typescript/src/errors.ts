/**
 * Errors: every failure of a call is a HermesError, with the server's `code` and `message`
 * and the HTTP `status` (undefined when no answer came). The class says what to do about it.
 */

export interface HermesErrorOptions {
  code: string;
  status?: number;
  cause?: unknown;
}

export class HermesError extends Error {
  // each class names itself (not new.target.name, which a minifier may rename)
  override name = "HermesError";
  /** the server's error code (`not_found`, `invalid`, …) or the client's own (`unreachable`, `incompatible`) */
  readonly code: string;
  /** the HTTP status; undefined when the server did not answer */
  readonly status: number | undefined;

  constructor(message: string, options: HermesErrorOptions) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = options.code;
    this.status = options.status;
  }
}

/** 404: no such session or memory, or another user's (the same answer, by design). */
export class NotFoundError extends HermesError {
  override name = "NotFoundError";
}

/** 400, 413, 415, 422: the request was refused as it is (bad field, id, role, size, content type…); nothing changed. */
export class ValidationError extends HermesError {
  override name = "ValidationError";
}

/** 401, 403, 421: no key, a wrong or revoked key, a user key acting for another user, or a host name the server does not answer to. */
export class AuthError extends HermesError {
  override name = "AuthError";
}

/** 409: the session's status forbids it (append to a deleted one…), or an id prefix is ambiguous. */
export class ConflictError extends HermesError {
  override name = "ConflictError";
}

/** 5xx: the server or what it stands on (Redis, the archive) failed; 503 may pass. */
export class ServerError extends HermesError {
  override name = "ServerError";
}

/** No answer: the server is down, unreachable, or did not answer within the timeout. */
export class ConnectionError extends HermesError {
  override name = "ConnectionError";
}

/**
 * The server answered, but not as a hermes-redis server this client knows: a route it does
 * not have (an older server), a reply without the fields this client reads, or a page that
 * is not JSON (a wrong base URL, a proxy in the way).
 */
export class IncompatibleServerError extends HermesError {
  override name = "IncompatibleServerError";
}

const BY_CODE: Record<string, new (message: string, options: HermesErrorOptions) => HermesError> = {
  invalid: ValidationError,
  malformed_json: ValidationError,
  too_large: ValidationError,
  unauthorized: AuthError,
  forbidden: AuthError,
  misdirected: AuthError,
  unsupported_media_type: ValidationError,
  not_found: NotFoundError,
  conflict: ConflictError,
  ambiguous_id: ConflictError,
  unavailable: ServerError,
  misconfigured: ServerError,
  internal: ServerError,
};

function byStatus(status: number): new (message: string, options: HermesErrorOptions) => HermesError {
  if (status >= 500) return ServerError;
  if (status === 401 || status === 403 || status === 421) return AuthError;
  if (status === 404) return NotFoundError;
  if (status === 409) return ConflictError;
  if (status === 400 || status === 413 || status === 415 || status === 422) return ValidationError;
  return HermesError;
}

/** The error for a `{"error": {"code", "message"}}` answer with HTTP `status`. */
export function errorFor(status: number, code: string, message: string): HermesError {
  const cls = BY_CODE[code] ?? byStatus(status);
  return new cls(message, { code, status });
}
