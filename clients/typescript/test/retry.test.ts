/**
 * Appends are safe to repeat: each message carries its id, and the client tries an append
 * again (3 tries in all) after a connection error or a 503. A proxy between client and real
 * server loses replies after the server stored the messages, or answers 503 itself.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { IncomingMessage, ServerResponse } from "node:http";
import { ConnectionError, HermesClient, newMessageId, ServerError } from "hermes-redis";
import { proxy, useStack } from "./support/fixture.js";

const stack = useStack();
const direct = () => new HermesClient({ baseUrl: stack().url });

interface Logged {
  method: string;
  url: string;
  body: string;
}

/** A proxy that handles the n-th request (from 1) to a `messages` POST as `plan(n)` says. */
async function flaky(plan: (n: number) => "pass" | "drop" | "503") {
  const log: Logged[] = [];
  const server = await proxy(
    () => stack().url,
    (req: IncomingMessage, res: ServerResponse, body: string) => {
      log.push({ method: req.method ?? "", url: req.url ?? "", body });
      const n = log.filter((l) => l.method === "POST" && l.url.endsWith("/messages")).length;
      const verdict = req.method === "POST" && req.url?.endsWith("/messages") ? plan(n) : "pass";
      if (verdict !== "503") return verdict;
      res.writeHead(503, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { code: "unavailable", message: "Redis is restarting" } }));
      return "answer";
    },
  );
  const appends = () => log.filter((l) => l.method === "POST" && l.url.endsWith("/messages"));
  return { ...server, log, appends };
}

describe("retried appends", () => {
  it("a reply lost after the server stored the message: the retry returns it, stored once", async () => {
    const sid = await direct().createSession();
    const px = await flaky((n) => (n === 1 ? "drop" : "pass"));
    try {
      const mem = new HermesClient({ baseUrl: px.url, retryDelayMs: 10 });
      const m = await mem.append(sid, "user", "only once, please");
      assert.equal(m.seq, 1);
      const [first, second] = px.appends();
      assert.ok(first && second && px.appends().length === 2, "tried twice");
      assert.equal(first.body, second.body, "the same body, message id and all");
      assert.equal((JSON.parse(first.body) as { message_id: string }).message_id, m.messageId);
      assert.deepEqual((await direct().messages(sid)).map((x) => x.content), ["only once, please"]);
    } finally {
      await px.close();
    }
  });

  it("a whole turn lost twice comes through on the third try, stored once", async () => {
    const sid = await direct().createSession();
    const px = await flaky((n) => (n <= 2 ? "drop" : "pass"));
    try {
      const mem = new HermesClient({ baseUrl: px.url, retryDelayMs: 10 });
      const stored = await mem.appendMany(sid, [
        { role: "user", content: "q" },
        { role: "assistant", content: "calling a tool" },
        { role: "tool", content: "result" },
        { role: "assistant", content: "a" },
      ]);
      assert.deepEqual(stored.map((m) => m.seq), [1, 2, 3, 4]);
      assert.equal(px.appends().length, 3);
      assert.equal((await direct().messages(sid)).length, 4);
    } finally {
      await px.close();
    }
  });

  it("503 twice, then through: three tries, waiting between them", async () => {
    const sid = await direct().createSession();
    const px = await flaky((n) => (n <= 2 ? "503" : "pass"));
    try {
      const mem = new HermesClient({ baseUrl: px.url, retryDelayMs: 50 });
      const started = Date.now();
      const m = await mem.append(sid, "user", "after the restart");
      assert.ok(Date.now() - started >= 140, "waited 50 then 100 ms (less a timer's rounding)");
      assert.equal(m.seq, 1);
      assert.equal(px.appends().length, 3);
    } finally {
      await px.close();
    }
  });

  it("tries are bounded: an append that never gets through fails after 3 tries with the last error", async () => {
    const sid = await direct().createSession();
    const px = await flaky(() => "503");
    try {
      const mem = new HermesClient({ baseUrl: px.url, retryDelayMs: 5 });
      await assert.rejects(mem.append(sid, "user", "never"), (err: unknown) => {
        assert.ok(err instanceof ServerError);
        assert.equal(err.status, 503);
        return true;
      });
      assert.equal(px.appends().length, 3);
      const once = new HermesClient({ baseUrl: px.url, appendTries: 1 });
      await assert.rejects(once.append(sid, "user", "never"), ServerError);
      assert.equal(px.appends().length, 4);
      const dropped = await flaky(() => "drop");
      try {
        await assert.rejects(new HermesClient({ baseUrl: dropped.url, retryDelayMs: 5 }).append(sid, "user", "x"), ConnectionError);
        assert.equal(dropped.appends().length, 3);
      } finally {
        await dropped.close();
      }
      assert.equal((await direct().messages(sid)).length, 1, "the dropped replies' message, stored once");
    } finally {
      await px.close();
    }
  });

  it("only appends are retried; other calls fail on the first 503", async () => {
    const sid = await direct().createSession();
    const px = await proxy(
      () => stack().url,
      (_req, res) => {
        res.writeHead(503, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { code: "unavailable", message: "down" } }));
        return "answer";
      },
    );
    let calls = 0;
    px.server.on("request", () => calls++);
    try {
      const mem = new HermesClient({ baseUrl: px.url, retryDelayMs: 5 });
      await assert.rejects(mem.info(sid), ServerError);
      await assert.rejects(mem.forgetLast(sid, 1), ServerError);
      assert.equal(calls, 2);
    } finally {
      await px.close();
    }
  });

  it("a message id the caller gives is used as is: appending it again returns the stored message", async () => {
    const mem = direct();
    const sid = await mem.createSession();
    const id = await newMessageId();
    const first = await mem.append(sid, "user", "idempotent", { messageId: id });
    const again = await mem.append(sid, "user", "idempotent", { messageId: id });
    assert.equal(first.messageId, id);
    // the same message (the server's reply to a repeat carries the repeat's createdAt)
    const same = (m: { messageId: string; seq: number; content: string }) => [m.messageId, m.seq, m.content];
    assert.deepEqual(same(again), same(first));
    const turn = [
      { role: "user" as const, content: "a", messageId: await newMessageId() },
      { role: "assistant" as const, content: "b", messageId: await newMessageId() },
    ];
    const once = await mem.appendMany(sid, turn);
    const twice = await mem.appendMany(sid, turn);
    assert.deepEqual(twice.map(same), once.map(same));
    assert.equal((await mem.messages(sid)).length, 3);
  });
});
