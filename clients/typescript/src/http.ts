/**
 * One request to the server and its answer: the decoded JSON, or a typed HermesError. A
 * failure to connect, a timeout, an HTML error page or a route the server lacks each become
 * an error with one line saying what happened, never a raw TypeError.
 */
import {
  ConnectionError,
  errorFor,
  HermesError,
  IncompatibleServerError,
  ServerError,
  ValidationError,
} from "./errors.js";

export type Method = "GET" | "POST" | "DELETE";
export type QueryValue = string | number | boolean | null | undefined;
export type Fetch = (input: string, init: RequestInit) => Promise<Response>;

export interface Call {
  method: Method;
  /** starting with "/"; ids already encoded */
  path: string;
  query?: Record<string, QueryValue>;
  /** sent as JSON; undefined sends no body */
  body?: unknown;
}

export interface TransportOptions {
  baseUrl: string;
  apiKey?: string | undefined;
  timeoutMs: number;
  fetch: Fetch;
}

const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms));

export class Transport {
  readonly baseUrl: string;
  private readonly headers: Record<string, string>;

  constructor(private readonly options: TransportOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.headers = { Accept: "application/json" };
    if (options.apiKey) this.headers.Authorization = `Bearer ${options.apiKey}`;
  }

  /** The decoded JSON answer (undefined for 204), or the HermesError it stands for. */
  async send(request: Call): Promise<unknown> {
    const { method, path } = request;
    const headers = { ...this.headers };
    let body: string | undefined;
    if (request.body !== undefined) {
      body = encode(request.body);
      headers["Content-Type"] = "application/json";
    }
    const url = this.baseUrl + path + queryString(request.query);
    let response: Response;
    let text: string;
    try {
      response = await this.options.fetch(url, { method, headers, body, signal: AbortSignal.timeout(this.options.timeoutMs) });
      text = await response.text();
    } catch (err) {
      throw this.unreachable(err, `${method} ${path}`);
    }
    return this.decode(response, text, `${method} ${path}`);
  }

  /**
   * `send`, tried again after a connection error or a 502/503/504, up to `tries` times in
   * all, waiting `delayMs`, then twice that… between tries. Only for requests that are safe
   * to repeat (an append carrying its message ids).
   */
  async sendRetrying(request: Call, tries: number, delayMs: number): Promise<unknown> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.send(request);
      } catch (err) {
        if (attempt >= tries || !transient(err)) throw err;
      }
      await sleep(delayMs * 2 ** (attempt - 1));
    }
  }

  private unreachable(err: unknown, what: string): HermesError {
    const name = err instanceof Error ? err.name : "";
    if (name === "TimeoutError" || name === "AbortError") {
      return new ConnectionError(
        `no answer from hermes-redis at ${this.baseUrl} to ${what} within ${this.options.timeoutMs / 1000} s`,
        { code: "timeout", cause: err },
      );
    }
    return new ConnectionError(
      `cannot reach hermes-redis at ${this.baseUrl} (${reason(err)}); is \`hermes-redis serve\` running there?`,
      { code: "unreachable", cause: err },
    );
  }

  private decode(response: Response, text: string, what: string): unknown {
    const status = response.status;
    if (status === 204) return undefined;
    const data = parse(text);
    const server = `hermes-redis at ${this.baseUrl}`;
    if (status >= 200 && status < 300) {
      if (data !== undefined) return data;
      throw new IncompatibleServerError(
        `${server} answered ${what} with ${status} and ${bodyKind(response, text)}, not JSON: is that URL a hermes-redis server?`,
        { code: "incompatible", status },
      );
    }
    const error = errorObject(data);
    if (error !== undefined) {
      if (status === 405 || (status === 404 && error.message.startsWith("no route "))) {
        throw new IncompatibleServerError(
          `${server} has no route ${what}: the server is older than this client; upgrade it (it said: ${error.message})`,
          { code: "incompatible", status },
        );
      }
      throw errorFor(status, error.code, error.message);
    }
    const said = `${server} answered ${what} with HTTP ${status} and ${data === undefined ? bodyKind(response, text) : "JSON that is not an error object"}`;
    if (status >= 500) {
      throw new ServerError(`${said}: the server, or a proxy in front of it, failed`, { code: "http_error", status });
    }
    throw new IncompatibleServerError(`${said}: is that URL a hermes-redis server (\`hermes-redis serve\`)?`, {
      code: "incompatible",
      status,
    });
  }
}

/** Whether a failed try may be repeated: no answer, or a gateway or server that is briefly unavailable. */
function transient(err: unknown): boolean {
  if (err instanceof ConnectionError) return true;
  return err instanceof ServerError && (err.status === 502 || err.status === 503 || err.status === 504);
}

function queryString(query: Record<string, QueryValue> | undefined): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query ?? {})) {
    if (value !== undefined && value !== null) params.append(name, String(value));
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

/** JSON for the body; what JSON cannot carry exactly (NaN, Infinity, BigInt, cycles) is refused here. */
function encode(body: unknown): string {
  try {
    return JSON.stringify(body, (key, value: unknown) => {
      if (typeof value === "number" && !Number.isFinite(value)) {
        throw new ValidationError(`${key || "body"} is ${value}: JSON holds finite numbers only`, { code: "invalid" });
      }
      return value;
    });
  } catch (err) {
    if (err instanceof HermesError) throw err;
    throw new ValidationError(`the request cannot be sent as JSON (${reason(err)})`, { code: "invalid", cause: err });
  }
}

function parse(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function errorObject(data: unknown): { code: string; message: string } | undefined {
  if (typeof data !== "object" || data === null || !("error" in data)) return undefined;
  const error: unknown = data.error;
  if (typeof error !== "object" || error === null) return undefined;
  const { code, message } = error as Record<string, unknown>;
  if (typeof code !== "string") return undefined;
  return { code, message: typeof message === "string" && message ? message : code };
}

function bodyKind(response: Response, text: string): string {
  if (!text) return "an empty body";
  const type = response.headers.get("content-type");
  return type ? `a ${type.split(";")[0]} body` : "a body that is not JSON";
}

/** Why a fetch failed, in a few words: undici hides the system error in `cause`. */
function reason(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause: unknown = err.cause;
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code;
    return typeof code === "string" ? `${code}: ${cause.message}` : cause.message;
  }
  return err.message;
}
