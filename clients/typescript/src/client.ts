/**
 * HermesClient: the hermes-redis HTTP API with the Python client's method names, camelCase.
 *
 *     const mem = new HermesClient({ baseUrl: "http://127.0.0.1:8080", apiKey });
 *     const sid = await mem.createSession({ title: "auth api" });
 *     await mem.append(sid, "user", "hi");
 *     const ctx = await mem.context(sid, { budget: 8000, query: "JWT" });
 */
import { ConflictError, HermesError, IncompatibleServerError, NotFoundError, ValidationError } from "./errors.js";
import { type Call, type Fetch, Transport } from "./http.js";
import { isSessionId, newMessageId } from "./ids.js";
import type {
  AppendOptions,
  CompactResult,
  Context,
  Memory,
  Message,
  NewMessage,
  Role,
  SearchHit,
  SessionInfo,
  SessionPage,
  SessionStatus,
} from "./types.js";
import {
  compactionFrom,
  contextFrom,
  hitFrom,
  listFrom,
  memoryFrom,
  messageFrom,
  numberFrom,
  poppedFrom,
  type Schemas,
  sessionFrom,
  sessionPageFrom,
  ShapeError,
} from "./wire.js";

export interface HermesClientOptions {
  /** where `hermes-redis serve` listens, e.g. "http://127.0.0.1:8080" */
  baseUrl: string;
  /** an API key (`hermes-redis key create`); none for an open loopback server */
  apiKey?: string | undefined;
  /** milliseconds to wait for each answer (default 30 000) */
  timeoutMs?: number;
  /** tries of an append in all, after a connection error or a 502/503/504 (default 3) */
  appendTries?: number;
  /** the wait before the second try of an append, doubled before each next one (default 100 ms) */
  retryDelayMs?: number;
  /** a fetch to use instead of the global one */
  fetch?: Fetch;
}

/** The most a list route gives in one answer. */
const PAGE = 1000;

export class HermesClient {
  readonly baseUrl: string;
  private readonly http: Transport;
  private readonly appendTries: number;
  private readonly retryDelayMs: number;

  constructor(options: HermesClientOptions) {
    checkBaseUrl(options.baseUrl);
    const fetcher = options.fetch ?? globalFetch();
    this.http = new Transport({
      baseUrl: options.baseUrl,
      apiKey: options.apiKey,
      timeoutMs: options.timeoutMs ?? 30_000,
      fetch: fetcher,
    });
    this.baseUrl = this.http.baseUrl;
    this.appendTries = Math.max(1, options.appendTries ?? 3);
    this.retryDelayMs = options.retryDelayMs ?? 100;
  }

  // --- sessions ------------------------------------------------------------------------------

  /** A new session; its id. `userId` defaults to the key's user ('default' with an admin key or none). */
  async createSession(options: { userId?: string; title?: string; sessionId?: string } = {}): Promise<string> {
    const body: Schemas["SessionIn"] = { user_id: options.userId, title: options.title, session_id: options.sessionId };
    const info = await this.call({ method: "POST", path: "/v1/sessions", body }, sessionFrom);
    return info.sessionId;
  }

  async info(sessionId: string): Promise<SessionInfo> {
    return this.call({ method: "GET", path: this.sessionPath(sessionId) }, sessionFrom);
  }

  /**
   * Sessions, newest first: up to `limit` (default 50; the server's pages are followed past
   * 1,000; Infinity: all), from `cursor` on. `nextCursor` continues the listing; null at its end.
   */
  async listSessions(
    options: { userId?: string; status?: SessionStatus | "all"; limit?: number; cursor?: string | null } = {},
  ): Promise<SessionPage> {
    const limit = options.limit ?? 50;
    const sessions: SessionInfo[] = [];
    let cursor = options.cursor ?? null;
    for (;;) {
      const query = { user_id: options.userId, status: options.status ?? "active", limit: Math.min(PAGE, limit - sessions.length), cursor };
      const page = await this.call({ method: "GET", path: "/v1/sessions", query }, sessionPageFrom);
      sessions.push(...page.sessions);
      cursor = page.nextCursor;
      if (cursor === null || sessions.length >= limit) return { sessions, nextCursor: cursor };
    }
  }

  /** The full id of the one session, among those the key can see, whose id starts with `prefix`. */
  async resolve(prefix: string): Promise<string> {
    checkSessionId(prefix);
    const every = (await this.listSessions({ status: "all", limit: Infinity })).sessions.map((s) => s.sessionId);
    if (every.includes(prefix)) return prefix;
    const found = every.filter((id) => id.startsWith(prefix)).sort();
    if (found.length === 0) {
      throw new NotFoundError(`no session matches '${prefix}'; see \`hermes-redis session list\``, { code: "not_found" });
    }
    if (found.length > 1) {
      const shown = found.slice(0, 5).join(", ");
      throw new ConflictError(`'${prefix}' matches ${found.length} sessions (${shown}); type more`, { code: "ambiguous_id" });
    }
    return found[0]!;
  }

  /**
   * A new session of the same user that continues this one: its first message carries this
   * one's summary and where it left off, and `parentSessionId` names this one. Its id.
   */
  async continueSession(sessionId: string): Promise<string> {
    const info = await this.call({ method: "POST", path: `${this.sessionPath(sessionId)}/continue` }, sessionFrom);
    return info.sessionId;
  }

  /**
   * A new session of the same user holding copies of this one's messages up to `atSeq`
   * (default: all); what is later said or forgotten in either never shows in the other. Its id.
   */
  async fork(sessionId: string, options: { atSeq?: number } = {}): Promise<string> {
    const body: Schemas["ForkIn"] = { at_seq: options.atSeq };
    const info = await this.call({ method: "POST", path: `${this.sessionPath(sessionId)}/fork`, body }, sessionFrom);
    return info.sessionId;
  }

  /** Delete a session; `purge` also removes its archived rows. */
  async delete(sessionId: string, options: { purge?: boolean } = {}): Promise<void> {
    await this.call({ method: "DELETE", path: this.sessionPath(sessionId), query: { purge: options.purge || undefined } }, none);
  }

  // --- messages ------------------------------------------------------------------------------

  /**
   * Store one message; the stored message, with its `seq` and `tokenCount`. It carries a
   * message id (made here unless given), so it is tried again after a connection error or a
   * 503 without being stored twice.
   */
  async append(sessionId: string, role: Role, content: string | undefined, options: AppendOptions = {}): Promise<Message> {
    const body = await messageIn({ ...options, role, content });
    return this.call({ method: "POST", path: `${this.sessionPath(sessionId)}/messages`, body }, messageFrom, true);
  }

  /** Store a whole turn in one atomic step (up to 1,000 messages), retried like `append`. */
  async appendMany(sessionId: string, messages: NewMessage[]): Promise<Message[]> {
    if (!Array.isArray(messages)) {
      throw new ValidationError("messages must be a list of message objects", { code: "invalid" });
    }
    const body: Schemas["MessageBatch"] = { messages: await Promise.all(messages.map(messageIn)) };
    const path = `${this.sessionPath(sessionId)}/messages`;
    return this.call({ method: "POST", path, body }, (data) => listFrom(data, "messages", messageFrom), true);
  }

  /**
   * The history in seq order after `afterSeq` (every page unless `limit`); with `last`, the
   * newest `last` messages.
   */
  async messages(sessionId: string, options: { afterSeq?: number; limit?: number; last?: number } = {}): Promise<Message[]> {
    const path = `${this.sessionPath(sessionId)}/messages`;
    const messagesOf = (data: unknown) => listFrom(data, "messages", messageFrom);
    if (options.last !== undefined && options.last <= PAGE) {
      return this.call({ method: "GET", path, query: { last: options.last } }, messagesOf);
    }
    const limit = options.limit ?? Infinity;
    const out: Message[] = [];
    let afterSeq = options.afterSeq ?? 0;
    for (;;) {
      const want = Math.min(PAGE, limit - out.length);
      const page = await this.call({ method: "GET", path, query: { after_seq: afterSeq, limit: want } }, messagesOf);
      out.push(...page);
      const newest = page[page.length - 1];
      if (newest === undefined || page.length < want || out.length >= limit) {
        return options.last === undefined ? out : out.slice(-options.last);
      }
      afterSeq = newest.seq;
    }
  }

  /**
   * What to send the model, within `budget` tokens (default: the model's window less the
   * reply reserve): memories, opening, summary, recalled excerpts for `query` (default: the
   * newest user message), then the newest turns. `touch: false` leaves the TTL alone.
   */
  async context(sessionId: string, options: { budget?: number; query?: string; touch?: boolean } = {}): Promise<Context> {
    const query = { budget: options.budget, query: options.query, touch: options.touch === false ? false : undefined };
    return this.call({ method: "GET", path: `${this.sessionPath(sessionId)}/context`, query }, contextFrom);
  }

  /** The context of `sessionId`, or of the user's most recently updated active session. */
  async resume(options: { sessionId?: string; userId?: string; budget?: number; query?: string } = {}): Promise<Context> {
    let sessionId = options.sessionId;
    if (sessionId === undefined) {
      const page = await this.listSessions({ userId: options.userId, status: "active", limit: 1 });
      sessionId = page.sessions[0]?.sessionId;
      if (sessionId === undefined) {
        const who = options.userId ? ` for user ${options.userId}` : "";
        throw new NotFoundError(`no active session${who}; create one first`, { code: "not_found" });
      }
    }
    return this.context(sessionId, { budget: options.budget, query: options.query });
  }

  // --- changing ------------------------------------------------------------------------------

  /** Forget the last `n` turns; how many messages were forgotten. */
  async forgetLast(sessionId: string, n: number): Promise<number> {
    const body: Schemas["ForgetIn"] = { last: n };
    return this.call({ method: "POST", path: `${this.sessionPath(sessionId)}/forget`, body }, (d) => numberFrom(d, "forgotten"));
  }

  /** Forget every message containing `keyword`; how many were forgotten. */
  async forgetKeyword(sessionId: string, keyword: string): Promise<number> {
    const body: Schemas["ForgetIn"] = { keyword };
    return this.call({ method: "POST", path: `${this.sessionPath(sessionId)}/forget`, body }, (d) => numberFrom(d, "forgotten"));
  }

  /** Start the context afresh; `history: true` also forgets every message of both tiers (memories stay). */
  async clear(sessionId: string, options: { history?: boolean } = {}): Promise<SessionInfo> {
    const query = { history: options.history || undefined };
    return this.call({ method: "POST", path: `${this.sessionPath(sessionId)}/clear`, query }, sessionFrom);
  }

  /** Take back the newest message (forgotten from both tiers); null when there is none. */
  async pop(sessionId: string): Promise<Message | null> {
    return this.call({ method: "POST", path: `${this.sessionPath(sessionId)}/pop` }, poppedFrom);
  }

  async archive(sessionId: string): Promise<SessionInfo> {
    return this.call({ method: "POST", path: `${this.sessionPath(sessionId)}/archive` }, sessionFrom);
  }

  async restore(sessionId: string): Promise<SessionInfo> {
    return this.call({ method: "POST", path: `${this.sessionPath(sessionId)}/restore` }, sessionFrom);
  }

  /** Summarize and trim the hot tier now; null when there was nothing to do. */
  async compact(sessionId: string): Promise<CompactResult | null> {
    return this.call({ method: "POST", path: `${this.sessionPath(sessionId)}/compact` }, compactionFrom);
  }

  // --- memories and search -------------------------------------------------------------------

  /**
   * Keep `text` as a persistent memory of the user (`userId`: default the key's user; an
   * admin key must name one); the memory's id (a near-duplicate answers the existing one).
   */
  async remember(text: string, options: { userId?: string; sessionId?: string } = {}): Promise<string> {
    const body: Schemas["MemoryIn"] = { text, user_id: options.userId, session_id: options.sessionId };
    const memory = await this.call({ method: "POST", path: "/v1/memories", body }, memoryFrom);
    return memory.memoryId;
  }

  /** The user's current memories, oldest first (`superseded: true`: with the replaced ones). */
  async memories(options: { userId?: string; query?: string; superseded?: boolean; limit?: number } = {}): Promise<Memory[]> {
    const query = { user_id: options.userId, query: options.query, limit: options.limit ?? PAGE, superseded: options.superseded || undefined };
    return this.call({ method: "GET", path: "/v1/memories", query }, (d) => listFrom(d, "memories", memoryFrom));
  }

  async forgetMemory(memoryId: string): Promise<void> {
    if (typeof memoryId !== "string" || !memoryId || memoryId.includes("/")) {
      throw new ValidationError("memoryId must be the id remember() returned", { code: "invalid" });
    }
    await this.call({ method: "DELETE", path: `/v1/memories/${encodeURIComponent(memoryId)}` }, none);
  }

  /** Full-text search over the sessions the key can see: archive hits, then the hot backlog. */
  async search(query: string, options: { userId?: string; limit?: number } = {}): Promise<SearchHit[]> {
    const q = { q: query, user_id: options.userId, limit: options.limit ?? 20 };
    return this.call({ method: "GET", path: "/v1/search", query: q }, (d) => listFrom(d, "hits", hitFrom));
  }

  /** Whether the server answers /readyz (Redis and the archive reachable). Never throws. */
  async ready(): Promise<boolean> {
    try {
      await this.http.send({ method: "GET", path: "/readyz" });
      return true;
    } catch {
      return false;
    }
  }

  // --- plumbing ------------------------------------------------------------------------------

  private sessionPath(sessionId: string): string {
    return `/v1/sessions/${checkSessionId(sessionId)}`;
  }

  /** Send `call` (retrying it when `retry`) and map the answer; a reply of the wrong shape is an IncompatibleServerError. */
  private async call<T>(call: Call, map: (data: unknown) => T, retry = false): Promise<T> {
    const data = retry
      ? await this.http.sendRetrying(call, this.appendTries, this.retryDelayMs)
      : await this.http.send(call);
    try {
      return map(data);
    } catch (err) {
      if (!(err instanceof ShapeError)) throw err;
      throw new IncompatibleServerError(
        `hermes-redis at ${this.baseUrl} answered ${call.method} ${call.path} without the expected ${err.message}: ` +
          "the server and this client do not match; upgrade the older one",
        { code: "incompatible", cause: err },
      );
    }
  }
}

function none(): void {}

/** A NewMessage as the server's MessageIn, with a message id made here when it has none. */
async function messageIn(m: NewMessage): Promise<Schemas["MessageIn"]> {
  return {
    role: m.role,
    content: m.content,
    tool_calls: m.toolCalls,
    file_refs: m.fileRefs,
    memory_refs: m.memoryRefs,
    message_id: m.messageId ?? (await newMessageId()),
    created_at: m.createdAt,
    item: m.item,
  };
}

/** `id` when it can be a session id: also keeps it one path segment. */
function checkSessionId(id: string): string {
  if (!isSessionId(id)) {
    const shown = JSON.stringify(id)?.slice(0, 80) ?? String(id);
    throw new ValidationError(`invalid session id ${shown}: use 1-64 characters of letters, digits, '_' or '-'`, { code: "invalid" });
  }
  return id;
}

function checkBaseUrl(baseUrl: unknown): void {
  let protocol = "";
  try {
    protocol = new URL(String(baseUrl)).protocol;
  } catch {
    // not a URL: said below
  }
  if (protocol !== "http:" && protocol !== "https:") {
    const shown = JSON.stringify(baseUrl)?.slice(0, 80) ?? String(baseUrl);
    throw new ValidationError(`baseUrl ${shown} is not an http(s) URL: use e.g. "http://127.0.0.1:8080"`, { code: "invalid" });
  }
}

function globalFetch(): Fetch {
  if (typeof globalThis.fetch !== "function") {
    throw new HermesError("no global fetch here (Node >= 18 and browsers have one): pass options.fetch", { code: "invalid" });
  }
  return (input, init) => globalThis.fetch(input, init);
}
