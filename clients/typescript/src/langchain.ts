/**
 * HermesChatMessageHistory: a LangChain.js chat history kept in hermes-redis.
 *
 *     import { HermesChatMessageHistory } from "hermes-redis/langchain";
 *     const history = new HermesChatMessageHistory({ sessionId: "user-42-chat", client: { baseUrl, apiKey }, budget: 8000 });
 *     await history.addMessages([new HumanMessage("hi"), new AIMessage("hello!")]);
 *     await history.getMessages(); // the budgeted context, as LangChain messages
 *
 * Each message is stored whole in the message's `item` as `{type, data}` (the shape both
 * LangChain.js's `toDict()` and Python's `messages_to_dict` give; a ChatMessage is stored
 * as "chat", the name Python reads), under the matching role (human -> user, ai ->
 * assistant, system, tool and function -> tool, a ChatMessage by its role). Read back, an item
 * of that shape is the same LangChain message; anything else (a message appended another
 * way) is its text under its role: Human, AI, System or Tool message.
 */
import { BaseListChatMessageHistory } from "@langchain/core/chat_history";
import {
  AIMessage,
  type BaseMessage,
  HumanMessage,
  mapStoredMessagesToChatMessages,
  type StoredMessage,
  SystemMessage,
  ToolMessage,
} from "@langchain/core/messages";
import { HermesClient, type HermesClientOptions } from "./client.js";
import { NotFoundError, ValidationError } from "./errors.js";
import { newMessageId } from "./ids.js";
import type { Context, Json, Message, NewMessage, Role } from "./types.js";

export interface HermesChatMessageHistoryInput {
  /** the hermes-redis session; created with this id on the first write */
  sessionId: string;
  /** a client, or the options to make one */
  client: HermesClient | HermesClientOptions;
  /** the owner of a session this creates (default: the key's user) */
  userId?: string;
  /** tokens the context may take (default: the server's, the model's window less the reply reserve) */
  budget?: number;
  /** what to recall older messages for (default: the newest user message) */
  query?: string;
  /** true: getMessages() returns every stored message instead of the budgeted context */
  raw?: boolean;
}

/** The most messages the server takes in one append. */
const MAX_BATCH = 1000;

export class HermesChatMessageHistory extends BaseListChatMessageHistory {
  lc_namespace = ["langchain", "stores", "message", "hermes_redis"];

  readonly sessionId: string;
  readonly client: HermesClient;
  private readonly userId: string | undefined;
  private readonly budget: number | undefined;
  private readonly query: string | undefined;
  private readonly raw: boolean;

  constructor(fields: HermesChatMessageHistoryInput) {
    super({ sessionId: fields.sessionId }); // only this is serialized: never the client or its key
    this.sessionId = fields.sessionId;
    this.client = fields.client instanceof HermesClient ? fields.client : new HermesClient(fields.client);
    this.userId = fields.userId;
    this.budget = fields.budget;
    this.query = fields.query;
    this.raw = fields.raw ?? false;
  }

  /**
   * The budgeted context: a SystemMessage with the user's memories, the summary of earlier
   * turns and the recalled excerpts (when there are any), then the opening turns and the
   * newest turns. With `raw: true`, every stored message instead. [] for a session not
   * created yet.
   */
  async getMessages(): Promise<BaseMessage[]> {
    try {
      if (this.raw) return (await this.client.messages(this.sessionId)).map(toLangChain);
      const context = await this.client.context(this.sessionId, { budget: this.budget, query: this.query });
      return contextMessages(context);
    } catch (err) {
      if (err instanceof NotFoundError) return [];
      throw err;
    }
  }

  async addMessage(message: BaseMessage): Promise<void> {
    await this.addMessages([message]);
  }

  /** Store `messages` in order; each 1,000 of them in one atomic step, retried safely. */
  override async addMessages(messages: BaseMessage[]): Promise<void> {
    const rows: NewMessage[] = [];
    for (const message of messages) rows.push({ ...toStored(message), messageId: await newMessageId() });
    for (let i = 0; i < rows.length; i += MAX_BATCH) await this.append(rows.slice(i, i + MAX_BATCH));
  }

  /** Forget every message for good; the user's persistent memories stay. */
  override async clear(): Promise<void> {
    try {
      await this.client.clear(this.sessionId, { history: true });
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err;
    }
  }

  private async append(batch: NewMessage[]): Promise<void> {
    try {
      await this.client.appendMany(this.sessionId, batch);
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err;
      try {
        await this.client.createSession({ sessionId: this.sessionId, userId: this.userId });
      } catch (created) {
        if (!(created instanceof ValidationError)) throw created; // made meanwhile by another writer: fine
      }
      await this.client.appendMany(this.sessionId, batch);
    }
  }
}

// --- LangChain message <-> stored message ---------------------------------------------------------

const ROLE_OF_TYPE: Record<string, Role> = { human: "user", ai: "assistant", system: "system", tool: "tool", function: "tool" };
const ROLE_OF_CHAT: Record<string, Role> = { user: "user", human: "user", assistant: "assistant", ai: "assistant", system: "system" };
/** Python's messages_to_dict names chunks by their class */
const CHUNKS: Record<string, string> = {
  HumanMessageChunk: "human",
  AIMessageChunk: "ai",
  SystemMessageChunk: "system",
  ToolMessageChunk: "tool",
  FunctionMessageChunk: "function",
  ChatMessageChunk: "chat",
};

/** The role and item a LangChain message is stored as. */
export function toStored(message: BaseMessage): { role: Role; item: Json } {
  const { type: jsType, data } = message.toDict();
  const type = jsType === "generic" ? "chat" : jsType;
  const role = type === "chat" ? (ROLE_OF_CHAT[String(data.role)] ?? "assistant") : (ROLE_OF_TYPE[type] ?? "assistant");
  // LangChain's data is JSON (undefined fields are left out when sent; anything else is refused then)
  return { role, item: { type, data } as unknown as Json };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A stored message as LangChain's: its item when that is a `{type, data}` message, else its text under its role. */
export function toLangChain(message: Message): BaseMessage {
  const item = message.item;
  if (isObject(item) && typeof item.type === "string" && isObject(item.data)) {
    const content = item.data.content;
    if (typeof content === "string" || Array.isArray(content)) {
      const type = CHUNKS[item.type] ?? item.type;
      // Python's dicts hold nulls and a copy of the type; LangChain.js leaves such fields out
      const data = Object.fromEntries(Object.entries(item.data).filter(([k, v]) => v !== null && k !== "type"));
      try {
        // StoredMessageData says content is a string; LangChain takes content blocks there too
        const stored = { type: type === "chat" ? "generic" : type, data } as unknown as StoredMessage;
        const [restored] = mapStoredMessagesToChatMessages([stored]);
        if (restored) return restored;
      } catch {
        // a type LangChain does not know, or a tool message without its call id: the text below
      }
    }
  }
  return byRole(message.role, message.content);
}

function byRole(role: string, content: string): BaseMessage {
  switch (role) {
    case "user":
      return new HumanMessage(content);
    case "system":
      return new SystemMessage(content);
    case "tool":
      return new ToolMessage({ content, tool_call_id: "" });
    default:
      return new AIMessage(content);
  }
}

// --- the context as LangChain messages ------------------------------------------------------------

const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];

/** "8 May 2023": a message's UTC day as the server's recall writes it. */
function saidOn(createdAt: number): string {
  const d = new Date(createdAt * 1000);
  return Number.isNaN(d.getTime()) ? "" : `${d.getUTCDate()} ${MONTHS[d.getUTCMonth()]} ${d.getUTCFullYear()}`;
}

/** The texts of the Python library's `Context.as_chat()`, in one system message. */
export function contextMessages(context: Context): BaseMessage[] {
  const parts: string[] = [];
  if (context.memories.length > 0) {
    parts.push("Things to remember about this user:\n" + context.memories.map((m) => `- ${m}`).join("\n"));
  }
  if (context.summary) parts.push(`Summary of the earlier conversation:\n${context.summary}`);
  if (context.recalled.length > 0) {
    const lines = ["Earlier excerpts from this conversation, recalled as relevant:"];
    let day = "";
    for (const m of context.recalled) {
      const said = saidOn(m.createdAt);
      if (said !== day) lines.push(`${(day = said)}:`);
      lines.push(`- ${m.role}: ${m.content.split(/\s+/).filter(Boolean).join(" ")}`);
    }
    parts.push(lines.join("\n"));
  }
  const head = parts.length > 0 ? [new SystemMessage(parts.join("\n\n"))] : [];
  return [...head, ...context.opening.map(toLangChain), ...context.messages.map(toLangChain)];
}
