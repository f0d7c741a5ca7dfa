/** What the client returns and takes: the server's objects with camelCase fields. */

/** Any JSON value (what `item` holds, kept exactly by the server). */
export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

export type Role = "user" | "assistant" | "system" | "tool";

export type SessionStatus = "active" | "archived" | "deleted";

/** A stored message. */
export interface Message {
  messageId: string;
  sessionId: string;
  /** 1, 2, 3… in the session, in the order stored */
  seq: number;
  role: string;
  /** the text (for a message stored with only an `item`: a rendering of it) */
  content: string;
  tokenCount: number;
  toolCalls: Json[] | { [key: string]: Json } | null;
  fileRefs: string[];
  memoryRefs: string[];
  /** Unix seconds */
  createdAt: number;
  /** the JSON value stored with the message, exactly as given; null when none */
  item: Json;
}

/** A message to append. */
export interface NewMessage {
  role: Role;
  /** required unless `item` is given (then a rendering of the item stands in for it) */
  content?: string;
  toolCalls?: Json[] | { [key: string]: Json };
  fileRefs?: string[];
  memoryRefs?: string[];
  /** 32 hex digits; one is made when absent, so a retried append is stored once */
  messageId?: string;
  /** Unix seconds; default now */
  createdAt?: number;
  /** any JSON value (a framework's message object), stored and returned exactly */
  item?: Json;
}

export type AppendOptions = Omit<NewMessage, "role" | "content">;

/** A session's state, both tiers. */
export interface SessionInfo {
  sessionId: string;
  userId: string;
  title: string;
  createdAt: number;
  updatedAt: number;
  totalTokens: number;
  messageCount: number;
  status: string;
  summary: string;
  summarySeq: number;
  lastSeq: number;
  flushedSeq: number;
  hotCount: number;
  archivedCount: number;
  /** seconds before the hot keys expire; null: no expiry */
  ttlLeft: number | null;
  /** the session this one continues or was forked from; null: none */
  parentSessionId: string | null;
  /** the parent's last seq this fork copied; null: not a fork */
  forkedAtSeq: number | null;
  tier: string;
  /** messages the hot tier holds that the archive does not yet */
  backlog: number;
}

export interface SessionPage {
  sessions: SessionInfo[];
  /** pass it back as `cursor` for the next page; null on the last one */
  nextCursor: string | null;
}

/** What goes to the model, in order: memories, opening, summary, recalled, then messages. */
export interface Context {
  sessionId: string;
  /** the newest turns, verbatim, from `firstSeq` on */
  messages: Message[];
  /** the running summary of the turns before them ("" when none) */
  summary: string;
  /** older messages recalled as relevant to the query */
  recalled: Message[];
  /** the first turns (the task), kept verbatim past the threshold */
  opening: Message[];
  /** the user's persistent memories */
  memories: string[];
  /** tokens of all of it; never over `budget` */
  tokens: number;
  budget: number;
  /** the model's context window */
  window: number;
  /** tokens / window */
  usage: number;
  firstSeq: number;
  /** tokens of each part: memories, opening, summary, recalled, newest (they add up to `tokens`) */
  parts: Record<string, number>;
  /** the archive holds every message up to this seq */
  archivedThrough: number;
  /** the summary covers messages up to this seq */
  summarizedThrough: number;
  /** memories were extracted from messages up to this seq (0: extraction is off) */
  extractedThrough: number;
  /** `messages` are every message since the last clear: the session fits */
  whole: boolean;
}

export interface CompactResult {
  summarizedUpto: number;
  trimmed: number;
  summaryTokens: number;
  kept: number;
}

/** A persistent memory of a user. */
export interface Memory {
  memoryId: string;
  userId: string;
  sessionId: string | null;
  content: string;
  createdAt: number | null;
  /** the message that said it, for a memory made from the conversation */
  seq: number | null;
  /** explicit, trigger or extracted */
  kind: string;
  topic: string | null;
  /** the newer memory that replaced it */
  supersededBy: string | null;
  current: boolean;
}

export interface SearchHit {
  sessionId: string;
  seq: number;
  role: string;
  snippet: string;
  title: string;
  score: number;
  tier: string;
}
