"""Invariant 4, raced: forget runs while a flush (and the compaction after it) is in flight,
50 rounds; what was forgotten is in neither tier, nor in a summary, nor in search, and it
does not come back through a later flush, a sweep, or a rebuild of the hot tier."""

from __future__ import annotations

import json
import random
import threading

from hermes_redis import SessionMemory
from tests.fault.conftest import Acked, audit, burst, figures, spawn_worker, stop
from tests.helpers import archive_query

ROUNDS = 50


def traces(mem: SessionMemory, sid: str, secret: str) -> list[str]:
    """Every place the secret could still hide."""
    found = []
    if archive_query(mem.config, "SELECT count(*) FROM messages WHERE content LIKE ?",
                     (f"%{secret}%",))[0][0]:
        found.append("archive messages")
    rows = archive_query(mem.config, "SELECT summary FROM sessions WHERE session_id=?", (sid,))
    if rows and secret in (rows[0][0] or ""):
        found.append("archive summary")
    if any(secret in m.content for m in mem.hot.messages(sid)):
        found.append("hot list")
    meta = mem.hot.meta(sid)
    if meta and secret in meta.summary:
        found.append("hot summary")
    if any(secret in m.content for m in mem.messages(sid)):
        found.append("messages()")
    if mem.search(secret):
        found.append("search")
    if secret in json.dumps(mem.context(sid).as_dict(), ensure_ascii=False):
        found.append("context")
    return found


def test_forget_racing_flush_50_rounds(fault_config, tmp_path):
    cfg, path = fault_config(max_messages=8, compression={"keep_recent": 2})
    mem = SessionMemory(cfg)
    racer = SessionMemory(cfg)  # the flushing side, as a worker would hold it
    worker = spawn_worker(path, tmp_path / "worker.log")  # a real worker races too
    rng = random.Random(4)
    acked: list[Acked] = []
    forgotten: set[str] = set()
    leaks: list[str] = []
    sids = []
    try:
        for r in range(ROUNDS):
            secret = f"zebra{r}quux"
            sid = mem.create_session(user_id="alice")
            sids.append(sid)
            doomed = []
            for t in range(8):
                text = (f"We decided the vault password is {secret}, Priya said." if t in (2, 6)
                        else f"Turn {t}: we decided to use PostgreSQL 16 here.")
                for role in ("user", "assistant"):
                    a = Acked.of(mem.append(sid, role, text))
                    acked.append(a)
                    if secret in text:
                        doomed.append(a.message_id)
            if r % 3 == 0:
                mem.flush(sid)  # some rounds: part of it archived already
            gate = threading.Barrier(2)
            mode = r % 2

            def flush_side(sid: str = sid, gate: threading.Barrier = gate,
                           mode: int = mode) -> None:
                gate.wait()
                racer.maintainer.flush(sid)
                racer.maintainer.compact(sid, force=mode == 1)

            thread = threading.Thread(target=flush_side)
            thread.start()
            gate.wait()
            if rng.random() < 0.5:
                mem.forget_keyword(sid, secret)
            else:  # the same messages by turn: the two turns holding the secret and after
                mem.forget_keyword(sid, secret.upper())
            thread.join(30)
            forgotten.update(doomed)
            racer.maintainer.flush(sid)
            leaks += [f"round {r}: {where}" for where in traces(mem, sid, secret)]
        stop(worker)
        burst(path, tmp_path / "burst.log")
        for sid in sids:  # the hot tier rebuilt from the archive must not bring them back
            mem.hot.drop(sid)
            mem.context(sid)
        leaks += [f"after rebuild: {w}" for r, sid in enumerate(sids)
                  for w in traces(mem, sid, f"zebra{r}quux")]
        assert not leaks, "\n".join(leaks)
        totals = audit(mem, acked, forgotten=forgotten)
    finally:
        stop(worker)
        mem.close()
        racer.close()
    assert totals["resurrected"] == 0
    figures("forget_race", rounds=ROUNDS, forgotten=len(forgotten), leaks=len(leaks), **totals)
