/**
 * Every route through HermesClient against a real `hermes-redis serve` with no API keys (open,
 * loopback only): what each call sends and what comes back, camelCase.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  ConflictError,
  HermesClient,
  type Message,
  type NewMessage,
  NotFoundError,
  type Role,
  ValidationError,
} from "hermes-redis";
import { recordingFetch, useStack } from "./support/fixture.js";

// small hot tier: /compact has something to summarize after a few turns
const stack = useStack({ config: { memory: { session: { max_messages: 6, compression: { keep_recent: 2 } } } } });
const client = () => new HermesClient({ baseUrl: stack().url });

const TOPICS = [
  "PostgreSQL as the database",
  "JWT access tokens for auth",
  "Redis for the cache",
  "Docker compose for local runs",
  "the CI pipeline",
  "structured logging",
  "rate limiting middleware",
  "deploying to Kubernetes",
];

/** A session of `TOPICS.length` user/assistant turns about one topic each. */
async function talkative(mem: HermesClient): Promise<string> {
  const sid = await mem.createSession({ title: "topics" });
  for (const topic of TOPICS) {
    await mem.appendMany(sid, [
      { role: "user", content: `Let us settle ${topic}. ${"Some more words about it. ".repeat(8)}` },
      { role: "assistant", content: `Agreed on ${topic}. ${"Here are the details. ".repeat(8)}` },
    ]);
  }
  return sid;
}

describe("sessions", () => {
  it("createSession returns the id; info shows the session in camelCase", async () => {
    const mem = client();
    const sid = await mem.createSession({ title: "auth api" });
    assert.match(sid, /^[0-9a-f]{32}$/);
    const info = await mem.info(sid);
    assert.equal(info.sessionId, sid);
    assert.equal(info.userId, "default"); // no keys: the default user
    assert.equal(info.title, "auth api");
    assert.equal(info.status, "active");
    assert.equal(info.messageCount, 0);
    assert.equal(info.lastSeq, 0);
    assert.equal(typeof info.createdAt, "number");
    assert.ok(!("session_id" in info), "no snake_case field is left");
  });

  it("createSession takes the session id and the user", async () => {
    const mem = client();
    assert.equal(await mem.createSession({ sessionId: "chat-42", userId: "carol" }), "chat-42");
    assert.equal((await mem.info("chat-42")).userId, "carol");
    await assert.rejects(mem.createSession({ sessionId: "chat-42" }), ValidationError);
  });

  it("resolve finds the one session an id prefix names; none is a NotFoundError, several a ConflictError", async () => {
    const mem = client();
    await mem.createSession({ sessionId: "prefix-one-a1" });
    await mem.createSession({ sessionId: "prefix-one-b2" });
    await mem.createSession({ sessionId: "prefix-one-b" });
    assert.equal(await mem.resolve("prefix-one-a"), "prefix-one-a1");
    assert.equal(await mem.resolve("prefix-one-b"), "prefix-one-b", "an exact id wins");
    await assert.rejects(mem.resolve("prefix-none"), NotFoundError);
    await assert.rejects(mem.resolve("prefix-one"), (err: unknown) => {
      assert.ok(err instanceof ConflictError);
      assert.equal(err.code, "ambiguous_id");
      assert.match(err.message, /'prefix-one' matches 3 sessions \(prefix-one-a1, prefix-one-b, prefix-one-b2\); type more/);
      return true;
    });
  });

  it("continueSession and fork make a new session of the same user that names its parent", async () => {
    const mem = client();
    const sid = await mem.createSession({ userId: "lineage" });
    for (const text of ["one", "two", "three"]) await mem.append(sid, "user", text);
    const forked = await mem.fork(sid, { atSeq: 2 });
    const info = await mem.info(forked);
    assert.equal(info.userId, "lineage");
    assert.equal(info.parentSessionId, sid);
    assert.equal(info.forkedAtSeq, 2);
    assert.deepEqual((await mem.messages(forked)).map((m) => m.content), ["one", "two"]);
    await mem.append(forked, "user", "only in the fork");
    assert.equal((await mem.info(sid)).messageCount, 3, "a fork's writes never reach its parent");
    const next = await mem.continueSession(sid.slice(0, 8));
    const continued = await mem.info(next);
    assert.equal(continued.parentSessionId, sid);
    assert.equal(continued.forkedAtSeq, null);
    await assert.rejects(mem.fork("no-such-session"), NotFoundError);
  });

  it("listSessions pages with a cursor, newest first, and filters by user and status", async () => {
    const mem = client();
    const made: string[] = [];
    for (const title of ["one", "two", "three"]) made.push(await mem.createSession({ userId: "lister", title }));
    const first = await mem.listSessions({ userId: "lister", limit: 2 });
    assert.deepEqual(first.sessions.map((s) => s.sessionId), [made[2], made[1]]);
    assert.ok(first.nextCursor);
    const second = await mem.listSessions({ userId: "lister", limit: 2, cursor: first.nextCursor });
    assert.deepEqual(second.sessions.map((s) => s.sessionId), [made[0]]);
    assert.equal(second.nextCursor, null);
    await mem.archive(made[0]!);
    assert.deepEqual((await mem.listSessions({ userId: "lister" })).sessions.length, 2);
    const archived = await mem.listSessions({ userId: "lister", status: "archived" });
    assert.deepEqual(archived.sessions.map((s) => s.sessionId), [made[0]]);
    assert.equal((await mem.listSessions({ userId: "lister", status: "all" })).sessions.length, 3);
  });

  it("archive and restore change the status; an archived session's context is a ConflictError", async () => {
    const mem = client();
    const sid = await mem.createSession();
    await mem.append(sid, "user", "before the archive");
    assert.equal((await mem.archive(sid)).status, "archived");
    await assert.rejects(mem.context(sid), (err: unknown) => {
      assert.ok(err instanceof ConflictError);
      assert.equal(err.status, 409);
      assert.equal(err.code, "conflict");
      return true;
    });
    const restored = await mem.restore(sid);
    assert.equal(restored.status, "active");
    assert.deepEqual((await mem.context(sid)).messages.map((m) => m.content), ["before the archive"]);
  });

  it("delete marks it deleted (appends are then a ConflictError); purge drops its messages", async () => {
    const mem = client();
    const sid = await mem.createSession();
    await mem.append(sid, "user", "soon gone");
    assert.equal(await mem.delete(sid), undefined);
    assert.equal((await mem.info(sid)).status, "deleted");
    await assert.rejects(mem.append(sid, "user", "too late"), ConflictError);
    assert.equal((await mem.messages(sid)).length, 1);
    await mem.delete(sid, { purge: true });
    assert.deepEqual(await mem.messages(sid), []);
  });
});

describe("messages", () => {
  it("append returns the stored message with seq and tokenCount, every field camelCase", async () => {
    const mem = client();
    const sid = await mem.createSession();
    const m = await mem.append(sid, "user", "帮我写一个 FastAPI 的用户认证接口", {
      fileRefs: ["app/auth.py"],
      item: { kind: "note", n: 1, nested: [true, null] },
    });
    assert.equal(m.seq, 1);
    assert.equal(m.sessionId, sid);
    assert.equal(m.role, "user");
    assert.equal(m.content, "帮我写一个 FastAPI 的用户认证接口");
    assert.ok(m.tokenCount > 0);
    assert.match(m.messageId, /^[0-9a-f]{32}$/);
    assert.deepEqual(m.fileRefs, ["app/auth.py"]);
    assert.deepEqual(m.memoryRefs, []);
    assert.equal(m.toolCalls, null);
    assert.deepEqual(m.item, { kind: "note", n: 1, nested: [true, null] });
    const second = await mem.append(sid, "assistant", "好的");
    assert.equal(second.seq, 2);
  });

  it("appendMany stores a 4-message turn in one request, in order", async () => {
    const { fetch, seen } = recordingFetch();
    const mem = new HermesClient({ baseUrl: stack().url, fetch });
    const sid = await mem.createSession();
    const turn: NewMessage[] = [
      { role: "user", content: "run the tests" },
      { role: "assistant", content: "running them", toolCalls: [{ id: "call_1", name: "sh", args: { cmd: "pytest" } }] },
      { role: "tool", content: "12 passed" },
      { role: "assistant", content: "all 12 pass" },
    ];
    const before = seen.length;
    const stored = await mem.appendMany(sid, turn);
    assert.equal(seen.length - before, 1, "one request for the whole turn");
    const body = JSON.parse(seen[seen.length - 1]!.body!) as { messages: { message_id: string }[] };
    assert.equal(body.messages.length, 4);
    assert.ok(body.messages.every((m) => /^[0-9a-f]{32}$/.test(m.message_id)), "each message carries an id");
    assert.deepEqual(stored.map((m) => m.seq), [1, 2, 3, 4]);
    assert.deepEqual(stored.map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
    assert.deepEqual(stored[1]!.toolCalls, [{ id: "call_1", name: "sh", args: { cmd: "pytest" } }]);
    assert.deepEqual(stored.map((m) => m.messageId), body.messages.map((m) => m.message_id));
    assert.deepEqual((await mem.messages(sid)).map((m) => m.content), turn.map((m) => m.content));
  });

  it("messages reads after a seq, up to a limit, the last N, and follows pages past 1,000", async () => {
    const mem = client();
    const sid = await mem.createSession();
    const batch = (from: number, n: number): NewMessage[] =>
      Array.from({ length: n }, (_, i) => ({ role: "user" as Role, content: `message ${from + i}` }));
    await mem.appendMany(sid, batch(1, 600));
    await mem.appendMany(sid, batch(601, 605));
    const all = await mem.messages(sid);
    assert.equal(all.length, 1205);
    assert.deepEqual(all.map((m) => m.seq), Array.from({ length: 1205 }, (_, i) => i + 1));
    assert.deepEqual((await mem.messages(sid, { afterSeq: 1200 })).map((m) => m.seq), [1201, 1202, 1203, 1204, 1205]);
    assert.deepEqual((await mem.messages(sid, { afterSeq: 10, limit: 3 })).map((m) => m.seq), [11, 12, 13]);
    assert.deepEqual((await mem.messages(sid, { last: 2 })).map((m) => m.content), ["message 1204", "message 1205"]);
    assert.equal((await mem.messages(sid, { last: 1100 }))[0]!.seq, 106);
  });

  it("pop takes back the newest message, then null when none is left", async () => {
    const mem = client();
    const sid = await mem.createSession();
    await mem.appendMany(sid, [{ role: "user", content: "question" }, { role: "assistant", content: "wrong answer" }]);
    const popped = await mem.pop(sid);
    assert.equal(popped?.content, "wrong answer");
    assert.equal(popped?.seq, 2);
    assert.deepEqual((await mem.messages(sid)).map((m) => m.content), ["question"]);
    assert.equal((await mem.pop(sid))?.content, "question");
    assert.equal(await mem.pop(sid), null);
  });

  it("forgetLast forgets turns and forgetKeyword messages, each saying how many", async () => {
    const mem = client();
    const sid = await mem.createSession();
    await mem.appendMany(sid, [
      { role: "user", content: "we use MySQL" },
      { role: "assistant", content: "noted" },
      { role: "user", content: "and a refresh token" },
      { role: "assistant", content: "the refresh token lives 7 days" },
    ]);
    assert.equal(await mem.forgetKeyword(sid, "MySQL"), 1);
    assert.deepEqual((await mem.messages(sid)).map((m) => m.seq), [2, 3, 4]);
    assert.equal(await mem.forgetLast(sid, 1), 2);
    assert.deepEqual((await mem.messages(sid)).map((m) => m.content), ["noted"]);
  });

  it("clear starts the context afresh; history: true forgets every message too", async () => {
    const mem = client();
    const sid = await mem.createSession();
    await mem.appendMany(sid, [{ role: "user", content: "old" }, { role: "assistant", content: "older" }]);
    const info = await mem.clear(sid);
    assert.equal(info.sessionId, sid);
    assert.deepEqual((await mem.context(sid)).messages, []);
    assert.equal((await mem.messages(sid)).length, 2, "plain clear keeps the history");
    await mem.clear(sid, { history: true });
    assert.deepEqual(await mem.messages(sid), []);
  });
});

describe("context", () => {
  it("a short session comes back whole, with the budget, window and usage", async () => {
    const mem = client();
    const sid = await mem.createSession();
    await mem.appendMany(sid, [{ role: "user", content: "hello there" }, { role: "assistant", content: "hi!" }]);
    const ctx = await mem.context(sid, { budget: 2000 });
    assert.equal(ctx.sessionId, sid);
    assert.deepEqual(ctx.messages.map((m) => m.content), ["hello there", "hi!"]);
    assert.equal(ctx.summary, "");
    assert.deepEqual(ctx.recalled, []);
    assert.deepEqual(ctx.memories, []);
    assert.equal(ctx.budget, 2000);
    assert.equal(ctx.firstSeq, 1);
    assert.ok(ctx.tokens > 0 && ctx.tokens <= 2000);
    assert.ok(ctx.window >= ctx.budget);
    assert.ok(Math.abs(ctx.usage - ctx.tokens / ctx.window) < 1e-3);
  });

  it("with a budget and a query: a summary, the recalled excerpt the query asks for, newest turns, within budget", async () => {
    const mem = client();
    const sid = await talkative(mem);
    const compaction = await mem.compact(sid);
    assert.ok(compaction, "compact had turns to summarize");
    assert.ok(compaction.summarizedUpto > 0 && compaction.trimmed > 0);
    assert.equal(typeof compaction.summaryTokens, "number");
    assert.equal(typeof compaction.kept, "number");
    const ctx = await mem.context(sid, { budget: 400, query: "JWT access tokens" });
    assert.ok(ctx.tokens <= 400, `tokens ${ctx.tokens} within the budget`);
    assert.equal(ctx.budget, 400);
    assert.notEqual(ctx.summary, "");
    assert.ok(ctx.recalled.some((m) => m.content.includes("JWT")), "the JWT turn is recalled");
    assert.ok(ctx.messages.length > 0 && ctx.messages.length < TOPICS.length * 2);
    assert.equal(ctx.messages[ctx.messages.length - 1]!.seq, TOPICS.length * 2);
    assert.equal(ctx.firstSeq, ctx.messages[0]!.seq);
    const other = await mem.context(sid, { budget: 400, query: "Docker compose" });
    assert.ok(other.recalled.some((m) => m.content.includes("Docker")));
    assert.equal(await mem.compact(await mem.createSession()), null, "an empty session has nothing to compact");
  });

  it("carries the user's memories; remember, memories and forgetMemory", async () => {
    const mem = client();
    const sid = await mem.createSession({ userId: "dana" });
    await mem.append(sid, "user", "hi");
    const id = await mem.remember("项目用 PostgreSQL，不用 MySQL", { userId: "dana", sessionId: sid });
    assert.match(id, /^mem_/);
    const listed = await mem.memories({ userId: "dana" });
    assert.deepEqual(listed.map((m) => [m.memoryId, m.content, m.userId, m.sessionId]), [
      [id, "项目用 PostgreSQL，不用 MySQL", "dana", sid],
    ]);
    assert.equal(listed[0]!.current, true);
    assert.equal(listed[0]!.kind, "explicit");
    assert.deepEqual((await mem.context(sid)).memories, ["项目用 PostgreSQL，不用 MySQL"]);
    assert.deepEqual(await mem.memories({ userId: "dana", query: "PostgreSQL" }).then((m) => m.length), 1);
    await mem.forgetMemory(id);
    assert.deepEqual(await mem.memories({ userId: "dana" }), []);
    await assert.rejects(mem.forgetMemory(id), NotFoundError);
  });

  it("resume gives the context of the user's newest active session", async () => {
    const mem = client();
    await mem.createSession({ userId: "erin" });
    const newest = await mem.createSession({ userId: "erin" });
    await mem.append(newest, "user", "where were we?");
    const ctx = await mem.resume({ userId: "erin" });
    assert.equal(ctx.sessionId, newest);
    await assert.rejects(mem.resume({ userId: "nobody-here" }), NotFoundError);
  });
});

describe("search and health", () => {
  it("search finds a message by its words, with its session and seq", async () => {
    const mem = client();
    const sid = await mem.createSession({ userId: "finn", title: "auth api" });
    await mem.appendMany(sid, [
      { role: "user", content: "which token?" },
      { role: "assistant", content: "we use a zebracorn token, 30 minutes" },
    ]);
    const hits = await mem.search("zebracorn", { userId: "finn" });
    assert.deepEqual(hits.map((h) => [h.sessionId, h.seq, h.role, h.title]), [[sid, 2, "assistant", "auth api"]]);
    assert.match(hits[0]!.snippet, /zebracorn/);
    assert.equal(typeof hits[0]!.score, "number");
    assert.equal(typeof hits[0]!.tier, "string");
    assert.deepEqual(await mem.search("zebracorn", { userId: "someone-else" }), []);
  });

  it("ready is true for a live server", async () => {
    assert.equal(await client().ready(), true);
  });
});

describe("errors the server answers", () => {
  it("an unknown session is a NotFoundError with the server's code, message and status", async () => {
    await assert.rejects(client().info("0123456789abcdef"), (err: unknown) => {
      assert.ok(err instanceof NotFoundError);
      assert.equal(err.name, "NotFoundError");
      assert.equal(err.status, 404);
      assert.equal(err.code, "not_found");
      assert.match(err.message, /no session 0123456789abcdef/);
      return true;
    });
  });

  it("a bad role is a ValidationError (422 invalid); content over the limit one too (413 too_large)", async () => {
    const mem = client();
    const sid = await mem.createSession();
    await assert.rejects(mem.append(sid, "robot" as Role, "hi"), (err: unknown) => {
      assert.ok(err instanceof ValidationError);
      assert.equal(err.status, 422);
      assert.equal(err.code, "invalid");
      assert.match(err.message, /unknown role 'robot'/);
      return true;
    });
    await assert.rejects(mem.append(sid, "user", "x".repeat(1_100_000)), (err: unknown) => {
      assert.ok(err instanceof ValidationError);
      assert.equal(err.status, 413);
      assert.equal(err.code, "too_large");
      return true;
    });
    await assert.rejects(mem.appendMany(sid, []), ValidationError);
    await assert.rejects(mem.context(sid, { budget: 0 }), ValidationError);
    assert.deepEqual(await mem.messages(sid), [], "nothing was stored");
  });

  it("what the client can tell is wrong is refused before any request", async () => {
    const { fetch, seen } = recordingFetch();
    const mem = new HermesClient({ baseUrl: stack().url, fetch });
    await assert.rejects(mem.info("../../healthz"), ValidationError);
    await assert.rejects(mem.append("x".repeat(65), "user", "hi"), ValidationError);
    await assert.rejects(mem.append("s1", "user", "hi", { createdAt: Number.NaN }), /finite numbers/);
    await assert.rejects(mem.append("s1", "user", "hi", { item: { n: Infinity } as unknown as Message["item"] }), ValidationError);
    await assert.rejects(mem.forgetMemory("a/b"), ValidationError);
    assert.equal(seen.length, 0);
  });
});
