/** Test helpers: a private stack per test file, and fetch wrappers that watch or bend requests. */
import { after, before } from "node:test";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Fetch } from "hermes-redis";
import { Stack, type StackOptions } from "../../tools/stack.js";

/** A stack started before this file's tests and stopped after them (also when they fail). */
export function useStack(options: StackOptions = {}): () => Stack {
  let stack: Stack | undefined;
  before(async () => {
    stack = await Stack.start(options);
  });
  after(async () => {
    await stack?.stop();
  });
  return () => {
    if (stack === undefined) throw new Error("the stack did not start");
    return stack;
  };
}

export interface Seen {
  method: string;
  url: string;
  body: string | undefined;
}

/** The global fetch, recording every request it sends. */
export function recordingFetch(): { fetch: Fetch; seen: Seen[] } {
  const seen: Seen[] = [];
  const fetcher: Fetch = (input, init) => {
    seen.push({ method: String(init.method), url: input, body: typeof init.body === "string" ? init.body : undefined });
    return fetch(input, init);
  };
  return { fetch: fetcher, seen };
}

/** The global fetch with each request changed by `bend` first (another path, method or body). */
export function bentFetch(bend: (url: string, init: RequestInit) => [string, RequestInit]): Fetch {
  return (input, init) => fetch(...bend(input, init));
}

/** The global fetch with each JSON reply changed by `bend` (a field taken away…). */
export function replyBentFetch(bend: (data: Record<string, unknown>) => unknown): Fetch {
  return async (input, init) => {
    const reply = await fetch(input, init);
    const data = (await reply.json()) as Record<string, unknown>;
    return new Response(JSON.stringify(bend(data)), { status: reply.status, headers: reply.headers });
  };
}

export type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void | Promise<void>;

/** An HTTP server on a free loopback port that answers with `handler`; close it with `close()`. */
export async function httpServer(handler: Handler): Promise<{ url: string; server: Server; close: () => Promise<void> }> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      Promise.resolve(handler(req, res, Buffer.concat(chunks).toString("utf8"))).catch((err: unknown) => {
        res.destroy(err instanceof Error ? err : new Error(String(err)));
      });
    });
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const { port } = server.address() as AddressInfo;
  const close = () =>
    new Promise<void>((done) => {
      server.closeAllConnections();
      server.close(() => done());
    });
  return { url: `http://127.0.0.1:${port}`, server, close };
}

/**
 * A proxy in front of `target`: each request goes to `decide` first, which may answer it
 * itself ("answer" it did), pass it on ("pass"), or pass it on and then cut the connection
 * before the reply reaches the client ("drop": the server did the work, the client never
 * hears of it).
 */
export async function proxy(
  target: () => string,
  decide: (req: IncomingMessage, res: ServerResponse, body: string) => "pass" | "drop" | "answer",
) {
  return httpServer(async (req, res, body) => {
    const verdict = decide(req, res, body);
    if (verdict === "answer") return;
    const headers: Record<string, string> = {};
    for (const name of ["authorization", "content-type", "accept"]) {
      const value = req.headers[name];
      if (typeof value === "string") headers[name] = value;
    }
    const method = req.method ?? "GET";
    const reply = await fetch(target() + (req.url ?? "/"), {
      method,
      headers,
      body: method === "GET" || method === "HEAD" ? undefined : body,
    });
    const text = await reply.text();
    if (verdict === "drop") {
      res.socket?.destroy();
      return;
    }
    res.writeHead(reply.status, { "content-type": reply.headers.get("content-type") ?? "application/json" });
    res.end(text);
  });
}
