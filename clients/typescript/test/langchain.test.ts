/**
 * HermesChatMessageHistory against a real server. @langchain/core ships no behaviour tests
 * for chat histories (its standard tests cover chat models only), so these are the checks
 * LangChain's own message stores make — add, get in order, clear, convenience methods,
 * isolation, persistence, RunnableWithMessageHistory — plus hermes-redis' own: the budgeted
 * context, messages stored by other doors, and messages Python's LangChain stored or reads.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  AIMessage,
  type BaseMessage,
  ChatMessage,
  HumanMessage,
  SystemMessage,
  ToolMessage,
} from "@langchain/core/messages";
import { ChatPromptTemplate, MessagesPlaceholder } from "@langchain/core/prompts";
import { RunnableLambda, RunnableWithMessageHistory } from "@langchain/core/runnables";
import { HermesClient, type Json, type NewMessage } from "hermes-redis";
import { HermesChatMessageHistory } from "hermes-redis/langchain";
import { REPO_DIR } from "../tools/stack.js";
import { recordingFetch, useStack } from "./support/fixture.js";

const stack = useStack({ config: { memory: { session: { max_messages: 6, compression: { keep_recent: 2 } } } } });
const client = () => new HermesClient({ baseUrl: stack().url });
let counter = 0;
const newSessionId = () => `lc-${process.pid}-${++counter}`;
const history = (options: { sessionId?: string; raw?: boolean; budget?: number; query?: string; userId?: string } = {}) =>
  new HermesChatMessageHistory({ sessionId: options.sessionId ?? newSessionId(), client: client(), ...options });

/** What a message is, compared across a round trip. */
function shape(m: BaseMessage): Record<string, unknown> {
  return {
    class: m.constructor.name,
    content: m.content,
    id: m.id,
    tool_calls: m instanceof AIMessage ? m.tool_calls : undefined,
    tool_call_id: m instanceof ToolMessage ? m.tool_call_id : undefined,
    role: m instanceof ChatMessage ? m.role : undefined,
    additional_kwargs: m.additional_kwargs,
  };
}

const EVERY_KIND = (): BaseMessage[] => [
  new SystemMessage("you are terse"),
  new HumanMessage({ content: "what files are there?", id: "h-1", additional_kwargs: { source: "cli" } }),
  new AIMessage({ content: "", tool_calls: [{ id: "call_1", name: "ls", args: { path: "." } }] }),
  new ToolMessage({ content: "a.py b.py", tool_call_id: "call_1" }),
  new AIMessage("two files"),
  new ChatMessage({ content: "looks fine", role: "critic" }),
  new HumanMessage({ content: [{ type: "text", text: "and this picture?" }] }),
];

describe("chat history behaviour", () => {
  it("getMessages of a session never written is []", async () => {
    assert.deepEqual(await history().getMessages(), []);
    assert.deepEqual(await history({ raw: true }).getMessages(), []);
  });

  it("addMessage and addMessages keep every kind of message, in order, equal on the way back (raw)", async () => {
    const h = history({ raw: true });
    const [first, ...rest] = EVERY_KIND();
    await h.addMessage(first!);
    await h.addMessages(rest);
    assert.deepEqual((await h.getMessages()).map(shape), EVERY_KIND().map(shape));
  });

  it("addUserMessage and addAIMessage add a Human and an AI message", async () => {
    const h = history({ raw: true });
    await h.addUserMessage("hi");
    await h.addAIMessage("hello!");
    const got = await h.getMessages();
    assert.deepEqual(got.map((m) => [m.constructor.name, m.content]), [["HumanMessage", "hi"], ["AIMessage", "hello!"]]);
  });

  it("addMessages stores a batch in one request, each message under its role, creating the session with its id and user", async () => {
    const { fetch, seen } = recordingFetch();
    const sessionId = newSessionId();
    const h = new HermesChatMessageHistory({ sessionId, client: new HermesClient({ baseUrl: stack().url, fetch }), userId: "hana" });
    await h.addMessages(EVERY_KIND());
    const appends = seen.filter((s) => s.method === "POST" && s.url.endsWith("/messages"));
    assert.equal(appends.length, 2, "one refused (no session yet), one stored, nothing more");
    const info = await client().info(sessionId);
    assert.equal(info.userId, "hana");
    const stored = await client().messages(sessionId);
    assert.deepEqual(stored.map((m) => m.role), ["system", "user", "assistant", "tool", "assistant", "assistant", "user"]);
    assert.deepEqual(stored.map((m) => (m.item as { type: string }).type), ["system", "human", "ai", "tool", "ai", "chat", "human"]);
    assert.equal(stored[1]!.content, "what files are there?", "the server renders the item as the text it searches");
    await h.addMessages([]);
    assert.equal(seen.filter((s) => s.method === "POST").length, appends.length + 1, "an empty batch sends nothing");
  });

  it("clear forgets every message; the user's memories stay", async () => {
    const sessionId = newSessionId();
    const h = history({ sessionId, userId: "ivan" });
    await h.addMessages([new HumanMessage("remember me"), new AIMessage("sure")]);
    await client().remember("ivan likes jazz", { userId: "ivan" });
    await h.clear();
    assert.deepEqual(await history({ sessionId, raw: true }).getMessages(), []);
    assert.deepEqual((await client().memories({ userId: "ivan" })).map((m) => m.content), ["ivan likes jazz"]);
    await history().clear(); // a session never written: nothing to do, no error
  });

  it("histories of different sessions are apart; a new instance over a session sees its messages", async () => {
    const a = newSessionId();
    const b = newSessionId();
    await history({ sessionId: a }).addMessages([new HumanMessage("in a")]);
    await history({ sessionId: b }).addMessages([new HumanMessage("in b")]);
    assert.deepEqual((await history({ sessionId: a, raw: true }).getMessages()).map((m) => m.content), ["in a"]);
    assert.deepEqual((await history({ sessionId: b }).getMessages()).map((m) => m.content), ["in b"]);
  });

  it("RunnableWithMessageHistory keeps a conversation in hermes-redis", async () => {
    const sessionId = newSessionId();
    const prompts: BaseMessage[][] = [];
    const model = RunnableLambda.from((prompt: { toChatMessages(): BaseMessage[] }) => {
      const messages = prompt.toChatMessages();
      prompts.push(messages);
      return new AIMessage(`answer ${prompts.length}`);
    });
    const prompt = ChatPromptTemplate.fromMessages([
      ["system", "be brief"],
      new MessagesPlaceholder("history"),
      ["human", "{question}"],
    ]);
    const chain = new RunnableWithMessageHistory({
      runnable: prompt.pipe(model),
      getMessageHistory: (id: string) => history({ sessionId: id }),
      inputMessagesKey: "question",
      historyMessagesKey: "history",
    });
    const config = { configurable: { sessionId } };
    await chain.invoke({ question: "first question" }, config);
    const second = await chain.invoke({ question: "second question" }, config);
    assert.equal(second.content, "answer 2");
    assert.deepEqual(prompts[1]!.map((m) => m.content), ["be brief", "first question", "answer 1", "second question"]);
    const stored = await history({ sessionId, raw: true }).getMessages();
    assert.deepEqual(stored.map((m) => [m.constructor.name, m.content]), [
      ["HumanMessage", "first question"],
      ["AIMessage", "answer 1"],
      ["HumanMessage", "second question"],
      ["AIMessage", "answer 2"],
    ]);
  });
});

describe("the budgeted context", () => {
  it("by default getMessages hands over the context: a SystemMessage with the user's memories, then the turns", async () => {
    const sessionId = newSessionId();
    const h = history({ sessionId, userId: "jo" });
    await h.addMessages([new HumanMessage("hello"), new AIMessage("hi there")]);
    assert.deepEqual((await h.getMessages()).map(shape), [new HumanMessage("hello"), new AIMessage("hi there")].map(shape));
    await client().remember("jo prefers tabs", { userId: "jo" });
    const [system, ...turns] = await h.getMessages();
    assert.ok(system instanceof SystemMessage);
    assert.equal(system.content, "Things to remember about this user:\n- jo prefers tabs");
    assert.deepEqual(turns.map((m) => m.content), ["hello", "hi there"]);
  });

  it("with a budget: the summary and recalled excerpts in the SystemMessage, the newest turns after it; raw has them all", async () => {
    const sessionId = newSessionId();
    const topics = ["PostgreSQL as the database", "JWT access tokens", "Redis as the cache", "Docker compose", "the CI pipeline", "rate limiting"];
    const turns = topics.flatMap((t) => [
      new HumanMessage(`Let us settle ${t}. ${"More words on it. ".repeat(8)}`),
      new AIMessage(`Agreed on ${t}. ${"The details follow. ".repeat(8)}`),
    ]);
    await history({ sessionId }).addMessages(turns);
    assert.ok(await client().compact(sessionId));
    const h = history({ sessionId, budget: 350, query: "JWT access tokens" });
    const [system, ...rest] = await h.getMessages();
    assert.ok(system instanceof SystemMessage);
    const text = String(system.content);
    assert.match(text, /^Summary of the earlier conversation:\n/);
    assert.match(text, /\n\nEarlier excerpts from this conversation, recalled as relevant:\n\d{1,2} [A-Z][a-z]+ \d{4}:\n- (user|assistant): .*JWT/);
    assert.ok(rest.length > 0 && rest.length < turns.length);
    assert.equal(rest[rest.length - 1]!.content, turns[turns.length - 1]!.content);
    assert.ok(rest.every((m) => m instanceof HumanMessage || m instanceof AIMessage));
    assert.equal((await history({ sessionId, raw: true }).getMessages()).length, turns.length);
  });
});

describe("messages from other doors", () => {
  it("messages appended without an item, or with an item of another shape, are their text under their role", async () => {
    const sessionId = await client().createSession();
    const rows: NewMessage[] = [
      { role: "system", content: "plain system" },
      { role: "user", content: "plain user" },
      { role: "assistant", content: "plain assistant" },
      { role: "tool", content: "plain tool output" },
      { role: "assistant", item: { type: "function_call", name: "ls", arguments: '{"path": "."}', call_id: "c1" } },
      { role: "user", content: "numbers are not content", item: { type: "human", data: { content: 42 } } },
      { role: "assistant", content: "a type LangChain lacks", item: { type: "hologram", data: { content: "?" } } },
      { role: "tool", content: "a tool result without its call id", item: { type: "tool", data: { content: "x" } } },
      { role: "user", content: "an item that is a string", item: "just a string" },
      { role: "assistant", content: "an item that is a list", item: [1, 2, 3] as Json },
    ];
    await client().appendMany(sessionId, rows);
    for (const raw of [true, false]) {
      const got = await history({ sessionId, raw }).getMessages();
      assert.deepEqual(got.map((m) => m.constructor.name), [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "HumanMessage",
        "AIMessage",
      ]);
      assert.deepEqual(got.map((m) => m.content), [
        "plain system",
        "plain user",
        "plain assistant",
        "plain tool output",
        'ls({"path": "."})',
        "numbers are not content",
        "a type LangChain lacks",
        "a tool result without its call id",
        "an item that is a string",
        "an item that is a list",
      ]);
    }
  });

  it("what Python's LangChain stored (messages_to_dict) reads back as the same messages", async () => {
    // langchain-core 1.8.3 (Python): messages_to_dict([HumanMessage("what files are there?", id="py-h1"),
    // AIMessage("", tool_calls=[...]), ToolMessage("a.py b.py", tool_call_id="call_9"), SystemMessage("be brief"),
    // ChatMessage(content="looks fine", role="critic")]), as hermes_redis.integrations.langchain stores them
    const python: { role: NewMessage["role"]; item: Json }[] = [
      { role: "user", item: { type: "human", data: { content: "what files are there?", additional_kwargs: {}, response_metadata: {}, type: "human", name: null, id: "py-h1" } } },
      { role: "assistant", item: { type: "ai", data: { content: "", additional_kwargs: {}, response_metadata: {}, type: "ai", name: null, id: null, tool_calls: [{ name: "ls", args: { path: "." }, id: "call_9", type: "tool_call" }], invalid_tool_calls: [], usage_metadata: null } } },
      { role: "tool", item: { type: "tool", data: { content: "a.py b.py", additional_kwargs: {}, response_metadata: {}, type: "tool", name: null, id: null, tool_call_id: "call_9", artifact: null, status: "success" } } },
      { role: "system", item: { type: "system", data: { content: "be brief", additional_kwargs: {}, response_metadata: {}, type: "system", name: null, id: null } } },
      { role: "assistant", item: { type: "chat", data: { content: "looks fine", additional_kwargs: {}, response_metadata: {}, type: "chat", name: null, id: null, role: "critic" } } },
    ];
    const sessionId = await client().createSession();
    await client().appendMany(sessionId, python);
    const got = await history({ sessionId, raw: true }).getMessages();
    assert.deepEqual(got.map((m) => m.constructor.name), ["HumanMessage", "AIMessage", "ToolMessage", "SystemMessage", "ChatMessage"]);
    assert.equal(got[0]!.id, "py-h1");
    assert.deepEqual((got[1] as AIMessage).tool_calls?.map((c) => [c.name, c.args, c.id]), [["ls", { path: "." }, "call_9"]]);
    assert.equal((got[2] as ToolMessage).tool_call_id, "call_9");
    assert.equal((got[4] as ChatMessage).role, "critic");
    assert.ok(got.every((m) => m.name === undefined), "Python's nulls are left out, as LangChain.js would");
  });

  it("what this history stores, Python's LangChain reads (messages_from_dict)", async (t) => {
    const python = process.env.HERMES_PYTHON || join(REPO_DIR, ".venv", "bin", "python");
    const probe = () => execFileSync(python, ["-c", "import langchain_core"], { stdio: "ignore" });
    try {
      if (!existsSync(python)) throw new Error("no python");
      probe();
    } catch {
      t.skip(`langchain-core is not installed for ${python} (pip install 'hermes-redis[langchain]')`);
      return;
    }
    const sessionId = newSessionId();
    await history({ sessionId }).addMessages(EVERY_KIND());
    const items = (await client().messages(sessionId)).map((m) => m.item);
    const script = [
      "import json, sys",
      "from langchain_core.messages import messages_from_dict",
      "for m in messages_from_dict(json.load(sys.stdin)):",
      "    print(json.dumps([type(m).__name__, m.content, getattr(m, 'tool_call_id', None), [c['id'] for c in getattr(m, 'tool_calls', [])], getattr(m, 'role', None)]))",
    ].join("\n");
    const out = execFileSync(python, ["-c", script], { input: JSON.stringify(items), encoding: "utf8" });
    const rows = out.trim().split("\n").map((line) => JSON.parse(line) as unknown[]);
    assert.deepEqual(rows, [
      ["SystemMessage", "you are terse", null, [], null],
      ["HumanMessage", "what files are there?", null, [], null],
      ["AIMessage", "", null, ["call_1"], null],
      ["ToolMessage", "a.py b.py", "call_1", [], null],
      ["AIMessage", "two files", null, [], null],
      ["ChatMessage", "looks fine", null, [], "critic"],
      ["HumanMessage", [{ type: "text", text: "and this picture?" }], null, [], null],
    ]);
  });
});
