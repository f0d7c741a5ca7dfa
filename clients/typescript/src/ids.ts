/**
 * Message ids as the server makes them (`hermes_redis.models.new_message_id`): 32 hex digits,
 * 48 bits of Unix milliseconds then 80 random bits. Time-ordered, so the server's flush-lag
 * metric, which reads the time from the id, stays right for messages this client names.
 */

type RandomSource = { getRandomValues<T extends ArrayBufferView | null>(array: T): T };

let source: RandomSource | undefined = (globalThis as { crypto?: RandomSource }).crypto;

/** Web Crypto: global in browsers and Node >= 19; Node 18 (without the flag) has it in node:crypto. */
async function random(): Promise<RandomSource> {
  if (source === undefined) {
    const name = "node:crypto"; // a variable, so browser bundlers leave it alone
    const mod = (await import(/* webpackIgnore: true */ /* @vite-ignore */ name)) as { webcrypto: RandomSource };
    source = mod.webcrypto;
  }
  return source;
}

export async function newMessageId(): Promise<string> {
  const bytes = (await random()).getRandomValues(new Uint8Array(10));
  const millis = Date.now().toString(16).padStart(12, "0");
  return millis + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

const SESSION_ID = /^[A-Za-z0-9_-]{1,64}$/;

/** Whether `id` can be a session id (or a unique prefix of one): also keeps it one path segment. */
export function isSessionId(id: unknown): id is string {
  return typeof id === "string" && SESSION_ID.test(id);
}
