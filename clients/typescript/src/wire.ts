/**
 * The wire: the server's JSON (snake_case, typed by src/schema.ts, generated from
 * /openapi.json) checked field by field and mapped to the camelCase objects of types.ts.
 *
 * Each spec names every field of its schema object (the compiler holds it to the generated
 * types), so a regenerated schema that adds or renames a field fails to build until the
 * mapping follows; at run time a reply without a field the client reads is a ShapeError.
 */
import type { components } from "./schema.js";
import type { CompactResult, Context, Json, Memory, Message, SearchHit, SessionInfo, SessionPage } from "./types.js";

export type Schemas = components["schemas"];

/** A reply that lacks a field this client reads, or holds the wrong type there. */
export class ShapeError extends Error {
  constructor(readonly field: string, readonly expected: string) {
    super(`field '${field}' is missing or not ${expected}`);
  }
}

interface Check {
  (value: unknown): boolean;
  readonly expected: string;
}

function check(expected: string, test: (value: unknown) => boolean): Check {
  return Object.assign(test, { expected });
}

const str = check("a string", (v) => typeof v === "string");
const num = check("a number", (v) => typeof v === "number");
const bool = check("a boolean", (v) => typeof v === "boolean");
const strings = check("a list of strings", (v) => Array.isArray(v) && v.every((s) => typeof s === "string"));
const list = check("a list", Array.isArray);
const anything = check("any JSON value", () => true);
const nullable = (c: Check) => check(`${c.expected} or null`, (v) => v === null || c(v));
/** absent, or as `c` says (a field the server may leave out) */
const optional = (c: Check) => check(`${c.expected} or absent`, (v) => v === undefined || c(v));

type Spec<T> = { [K in keyof T]-?: Check };

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** `data` as a `T`, once every field of `spec` passed its check. */
function read<T>(data: unknown, spec: Spec<T>, where = ""): T {
  if (!isObject(data)) throw new ShapeError(where || "(the reply)", "an object");
  for (const [field, test] of Object.entries(spec) as [string, Check][]) {
    if (!test(data[field])) throw new ShapeError(where + field, test.expected);
  }
  return data as T;
}

const MESSAGE: Spec<Schemas["MessageOut"]> = {
  message_id: str,
  session_id: str,
  seq: num,
  role: str,
  content: str,
  token_count: num,
  tool_calls: nullable(anything),
  file_refs: strings,
  memory_refs: strings,
  created_at: num,
  item: optional(anything),
};

export function messageFrom(data: unknown, where = ""): Message {
  const m = read(data, MESSAGE, where);
  return {
    messageId: m.message_id,
    sessionId: m.session_id,
    seq: m.seq,
    role: m.role,
    content: m.content,
    tokenCount: m.token_count,
    toolCalls: m.tool_calls as Message["toolCalls"],
    fileRefs: m.file_refs,
    memoryRefs: m.memory_refs,
    createdAt: m.created_at,
    item: (m.item ?? null) as Json,
  };
}

function messagesFrom(data: unknown, field: string): Message[] {
  if (!Array.isArray(data)) throw new ShapeError(field, "a list");
  return data.map((m, i) => messageFrom(m, `${field}[${i}].`));
}

const SESSION: Spec<Schemas["SessionOut"]> = {
  session_id: str,
  user_id: str,
  title: str,
  created_at: num,
  updated_at: num,
  total_tokens: num,
  message_count: num,
  status: str,
  summary: str,
  summary_seq: num,
  last_seq: num,
  flushed_seq: num,
  hot_count: num,
  archived_count: num,
  ttl_left: nullable(num),
  parent_session_id: nullable(str), // issue 30
  forked_at_seq: nullable(num),
  tier: str,
  backlog: num,
};

export function sessionFrom(data: unknown, where = ""): SessionInfo {
  const s = read(data, SESSION, where);
  return {
    sessionId: s.session_id,
    userId: s.user_id,
    title: s.title,
    createdAt: s.created_at,
    updatedAt: s.updated_at,
    totalTokens: s.total_tokens,
    messageCount: s.message_count,
    status: s.status,
    summary: s.summary,
    summarySeq: s.summary_seq,
    lastSeq: s.last_seq,
    flushedSeq: s.flushed_seq,
    hotCount: s.hot_count,
    archivedCount: s.archived_count,
    ttlLeft: s.ttl_left,
    parentSessionId: s.parent_session_id,
    forkedAtSeq: s.forked_at_seq,
    tier: s.tier,
    backlog: s.backlog,
  };
}

export function sessionPageFrom(data: unknown): SessionPage {
  const page = read<Schemas["SessionsOut"]>(data, { sessions: list, next_cursor: nullable(str) });
  return { sessions: page.sessions.map((s, i) => sessionFrom(s, `sessions[${i}].`)), nextCursor: page.next_cursor };
}

const CONTEXT: Spec<Schemas["ContextOut"]> = {
  session_id: str,
  summary: str,
  memories: strings,
  tokens: num,
  budget: num,
  window: num,
  usage: num,
  first_seq: num,
  opening: list,
  recalled: list,
  messages: list,
  parts: check("an object of token counts", (v) => isObject(v) && Object.values(v).every((n) => typeof n === "number")),
  archived_through: num,
  summarized_through: num,
  extracted_through: num,
  whole: bool,
};

export function contextFrom(data: unknown): Context {
  const c = read(data, CONTEXT);
  return {
    sessionId: c.session_id,
    messages: messagesFrom(c.messages, "messages"),
    summary: c.summary,
    recalled: messagesFrom(c.recalled, "recalled"),
    opening: messagesFrom(c.opening, "opening"),
    memories: c.memories,
    tokens: c.tokens,
    budget: c.budget,
    window: c.window,
    usage: c.usage,
    firstSeq: c.first_seq,
    parts: c.parts,
    archivedThrough: c.archived_through,
    summarizedThrough: c.summarized_through,
    extractedThrough: c.extracted_through,
    whole: c.whole,
  };
}

const COMPACTION: Spec<Schemas["CompactionOut"]> = {
  summarized_upto: num,
  trimmed: num,
  summary_tokens: num,
  kept: num,
};

export function compactionFrom(data: unknown): CompactResult | null {
  if (!isObject(data)) throw new ShapeError("compaction", "an object or null");
  if (data.compaction === null) return null;
  const c = read(data.compaction, COMPACTION, "compaction.");
  return { summarizedUpto: c.summarized_upto, trimmed: c.trimmed, summaryTokens: c.summary_tokens, kept: c.kept };
}

const MEMORY: Spec<Schemas["MemoryOut"]> = {
  memory_id: str,
  user_id: str,
  session_id: nullable(str),
  content: str,
  created_at: optional(nullable(num)),
  seq: optional(nullable(num)),
  kind: optional(str),
  topic: optional(nullable(str)),
  superseded_by: optional(nullable(str)),
  current: optional(bool),
  token_count: optional(num), // sent; this client does not read it
};

export function memoryFrom(data: unknown, where = ""): Memory {
  const m = read(data, MEMORY, where);
  return {
    memoryId: m.memory_id,
    userId: m.user_id,
    sessionId: m.session_id,
    content: m.content,
    createdAt: m.created_at ?? null,
    seq: m.seq ?? null,
    kind: m.kind ?? "explicit",
    topic: m.topic ?? null,
    supersededBy: m.superseded_by ?? null,
    current: m.current ?? true,
  };
}

const HIT: Spec<Schemas["HitOut"]> = {
  session_id: str,
  seq: num,
  role: str,
  snippet: str,
  title: str,
  score: num,
  tier: str,
};

export function hitFrom(data: unknown, where = ""): SearchHit {
  const h = read(data, HIT, where);
  return { sessionId: h.session_id, seq: h.seq, role: h.role, snippet: h.snippet, title: h.title, score: h.score, tier: h.tier };
}

/** The list under `field` of a reply such as {"messages": [...]}. */
export function listFrom<T>(data: unknown, field: string, each: (item: unknown, where: string) => T): T[] {
  if (!isObject(data) || !Array.isArray(data[field])) throw new ShapeError(field, "a list");
  return (data[field] as unknown[]).map((item, i) => each(item, `${field}[${i}].`));
}

/** The number under `field` of a reply such as {"forgotten": 2}. */
export function numberFrom(data: unknown, field: string): number {
  if (!isObject(data) || typeof data[field] !== "number") throw new ShapeError(field, "a number");
  return data[field] as number;
}

/** The message under "message" of a pop reply, or null. */
export function poppedFrom(data: unknown): Message | null {
  const p = read<Schemas["PoppedOut"]>(data, { message: nullable(anything) });
  return p.message === null ? null : messageFrom(p.message, "message.");
}
