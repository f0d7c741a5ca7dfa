"""The product in one run (``bash scripts/run.sh``), on the configured backend (the embedded
Redis by default): a 59-message conversation (scripts/demo_chat.py) goes into session
``demo-session``, a worker archives and compacts it, then the demo shows what the model would
get at a 2,000-token window — its parts with their tokens —, the early fact that recall brings
back for the newest question, the persistent memory a "记住…" turn stored, and ``info``'s usage
line.

Each run starts ``demo-session`` afresh (deleted, purged, and the ``demo`` user's memories
forgotten), so runs do not pile up sessions."""

from __future__ import annotations

import contextlib
import logging
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # demo_chat beside this file

from demo_chat import EXCHANGES, PORT, QUESTION, REMEMBER

from hermes_redis import SessionMemory, commands
from hermes_redis.cli import render
from hermes_redis.cli.render import tokens_k
from hermes_redis.cli.state import one_line
from hermes_redis.core import config as config_mod
from hermes_redis.core.errors import HermesError, NotFoundError
from hermes_redis.core.models import Context, Message
from hermes_redis.jobs.worker import run

SESSION = "demo-session"
USER = "demo"
WINDOW = 2_000  # tokens: a small model window, so 59 messages do not fit whole


def short(text: str, width: int = 88) -> str:
    return textwrap.shorten(" ".join(text.split()), width, placeholder=" …")


def seqs(messages: Sequence[Message]) -> str:
    if not messages:
        return "-"
    first, last = messages[0].seq, messages[-1].seq
    return f"#{first}" if first == last else f"#{first}–#{last}"


def reset(mem: SessionMemory) -> None:
    """Forget the previous run: its session (both tiers, archive rows too) and the demo user's
    memories."""
    try:
        mem.info(SESSION)
    except NotFoundError:
        pass
    else:
        mem.delete(SESSION, purge=True)
    for memory in mem.memories(USER, superseded=True):
        mem.forget_memory(memory.memory_id, USER)


def converse(mem: SessionMemory) -> None:
    mem.create_session(user_id=USER, session_id=SESSION)
    for user, reply in EXCHANGES:
        mem.append_many(SESSION, [{"role": "user", "content": user},
                                  {"role": "assistant", "content": reply}])
    mem.append(SESSION, "user", QUESTION)


def show_context(ctx: Context, parts: dict[str, int]) -> None:
    print(f"\nWhat the model gets at a {WINDOW:,}-token window "
          f"({ctx.tokens:,} tokens, in this order):")
    rows = [
        ("memories", parts["memories"],
         "; ".join(short(m, 60) for m in ctx.memories) or "-"),
        ("opening", parts["opening"], f"{seqs(ctx.opening)} the first exchange, as said"),
        ("summary", parts["summary"],
         "older turns, condensed: " + short(ctx.summary, 60) if ctx.summary else "-"),
        ("recalled", parts["recalled"],
         ", ".join(f"#{m.seq}" for m in ctx.recalled) + " older messages about the question"
         if ctx.recalled else "-"),
        ("newest", parts["newest"], f"{seqs(ctx.messages)} verbatim, the question last"),
    ]
    for name, tokens, what in rows:
        share = f"{tokens / ctx.tokens:4.0%}" if ctx.tokens else "   -"
        print(f"  {name:<9}{tokens:>6,} tokens {share}  {what}")


@contextlib.contextmanager
def quiet_worker() -> Iterator[None]:
    """The worker's one INFO line a job (``flush demo-session: archived 59 …``) would land in
    the middle of the demo, which says the same in its own line: only warnings show."""
    logger = logging.getLogger("hermes_redis")
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)  # INFO enabled: the worker adds no handler of its own
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def main(argv: Sequence[str] = ()) -> int:
    """``demo.py [CONFIG]``: the config file (default: the repo's config.yml, the embedded Redis).
    An expected error (a bad config, Redis away) is one ``Error: …`` line, as in the CLI."""
    try:
        return demo(argv)
    except HermesError as err:
        print(f"Error: {one_line(str(err)) or type(err).__name__}", file=sys.stderr)
        return err.exit_code


def demo(argv: Sequence[str]) -> int:
    path = argv[0] if argv else Path(__file__).resolve().parent.parent / "config.yml"
    configured = config_mod.load(path)
    config = configured.with_overrides(model={"context_window": WINDOW, "reply_reserve": 0})
    with SessionMemory(config) as mem:
        where = mem.hot.url or mem.hot.name
        print(f"demo: session {SESSION} on {mem.hot.name} ({where}), archive {config.archive_path}")
        reset(mem)
        started = time.monotonic()
        converse(mem)
        info = mem.info(SESSION)
        print(f"demo: appended {info.message_count} messages ({info.total_tokens:,} tokens) "
              f"in {time.monotonic() - started:.1f} s")

        started = time.monotonic()
        if mem.hot.needs_worker:
            with quiet_worker():
                run(mem, burst=True)  # what `hermes-redis worker` does all the time
            how = "a worker (hermes-redis worker --burst)"
        else:
            mem.flush(SESSION)
            how = "in-process (memory backend)"
        if mem.info(SESSION).summary_seq == 0:  # under the caps: fold now, as `session compact`
            mem.compact(SESSION)
        info = mem.info(SESSION)
        print(f"demo: {how} archived {info.archived_count} messages and compacted: the summary "
              f"covers #1–#{info.summary_seq}, {info.hot_count} stay in Redis "
              f"({time.monotonic() - started:.1f} s)")

        ctx = mem.context(SESSION, budget=WINDOW, touch=False)
        show_context(ctx, render.context_parts(ctx, mem.tokenizer))

        print(f'\nRecall: the newest question, #{ctx.messages[-1].seq} "{short(QUESTION, 70)}"')
        found = [m for m in ctx.recalled if PORT in m.content]
        if found:
            for m in found:
                print(f'  brought back #{m.seq} ({m.role}), said {info.last_seq - m.seq} messages '
                      f'earlier: "{short(m.content, 80)}"')
        else:
            print(f"  the context holds no message with {PORT} (recall found it not)")

        print("\nMemory: a user turn that starts with 记住 (remember) stored a persistent memory:")
        said = next(m for m in mem.messages(SESSION) if m.content == REMEMBER)
        memories = mem.memories(USER)
        for memory in memories:
            print(f'  [{memory.kind}] from #{said.seq} "{short(said.content, 40)}": '
                  f"{short(memory.content, 60)}")
        if not memories:
            print(f"  none stored from #{said.seq}")
        print("  every new session of user demo opens with it (the memories part above)")

        print("\ninfo (the /info slash command; `hermes-redis info` shows the same, longer):")
        for line in (commands.handle(mem, SESSION, "/info") or "").splitlines():
            print(f"  {line}")
        window = configured.model.context_window
        print(f"\nnext: bash scripts/run.sh info {SESSION}   |   bash scripts/run.sh session resume "
              f"{SESSION}   |   bash scripts/run.sh serve")
        print(f"  (info measures usage against model.context_window in {path}, {tokens_k(window)} "
              f"tokens: not the {WINDOW:,} this demo set)")
    if config.session.backend == "redis" and not config.redis.url:
        print(f"\nThe embedded redis-server keeps running (data in {config.data_dir}) for the "
              "commands above; stop it with: bash scripts/run.sh server stop")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
