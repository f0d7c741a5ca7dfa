"""An agent host's process: appends to its own sessions through the HTTP API with the real
``HermesClient``, each message under an id it chose, and retries that same id until it is
acknowledged (issue 35 part 8). Every outcome is one JSON line in ``--out``, written as it
happens, so a record survives whatever happens to the process::

    {"kind": "session", "agent", "sid"}
    {"kind": "ack", "agent", "sid", "mid", "seq", "first": t, "t": t, "attempts": n}
    {"kind": "error", "agent", "sid", "mid", "t", "error": "BackendUnavailableError: …"}
    {"kind": "rejected", …}   a 4xx on a valid append (a bug: never retried)
    {"kind": "unacked", …}    still unacknowledged when the process had to stop

One thread per session, one request in flight per session (an agent waits for its turn to be
stored before the next). SIGTERM: no new message; the one in flight is retried until
acknowledged or ``--drain`` seconds pass."""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
import uuid
from typing import Any

from hermes_redis.client import AuthError, HermesClient
from hermes_redis.core.errors import HermesError, NotFoundError, ValidationError

NEVER_RETRIED = (ValidationError, NotFoundError, AuthError)


class Recorder:
    def __init__(self, path: str, agent: str) -> None:
        self.file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 -- process lifetime
        self.agent, self.lock = agent, threading.Lock()

    def write(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"kind": kind, "agent": self.agent, **fields})
        with self.lock:
            self.file.write(line + "\n")


class Agent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stop = threading.Event()
        self.rec = Recorder(args.out, args.name)
        self.client = HermesClient(args.url, args.key, timeout=args.timeout)

    def create(self, k: int) -> str:
        while True:
            try:
                sid = self.client.create_session(title=f"{self.args.name} {k}")
                self.rec.write("session", sid=sid)
                return sid
            except HermesError as err:
                if isinstance(err, NEVER_RETRIED):
                    raise
                time.sleep(0.1)

    def append_until_acked(self, sid: str, n: int) -> bool:
        mid = uuid.uuid4().hex
        content = f"{self.args.name} message {n} of {sid}"
        first, attempts = time.time(), 0
        drain_deadline: float | None = None
        while True:
            if self.stop.is_set():
                drain_deadline = drain_deadline or time.time() + self.args.drain
                if time.time() > drain_deadline:
                    self.rec.write("unacked", sid=sid, mid=mid, t=time.time(), attempts=attempts)
                    return False
            attempts += 1
            try:
                msg = self.client.append(sid, "user", content, message_id=mid)
            except NEVER_RETRIED as err:
                self.rec.write("rejected", sid=sid, mid=mid, t=time.time(),
                               error=f"{type(err).__name__}: {err}")
                return False
            except HermesError as err:
                self.rec.write("error", sid=sid, mid=mid, t=time.time(),
                               error=f"{type(err).__name__}: {str(err)[:160]}")
                time.sleep(self.args.backoff)
                continue
            self.rec.write("ack", sid=sid, mid=mid, seq=msg.seq, first=first, t=time.time(),
                           attempts=attempts, stored_mid=msg.message_id)
            return True

    def session_loop(self, k: int) -> None:
        sid = self.create(k)
        n = 0
        while not self.stop.is_set():
            n += 1
            self.append_until_acked(sid, n)
            time.sleep(self.args.pause)

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.stop.set())
        threads = [threading.Thread(target=self.session_loop, args=(k,))
                   for k in range(self.args.sessions)]
        for thread in threads:
            thread.start()
        self.rec.write("started", t=time.time())
        for thread in threads:
            thread.join()
        self.rec.write("stopped", t=time.time())
        self.client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per HTTP call")
    parser.add_argument("--pause", type=float, default=0.02, help="seconds between appends")
    parser.add_argument("--backoff", type=float, default=0.1, help="seconds before a retry")
    parser.add_argument("--drain", type=float, default=30.0)
    Agent(parser.parse_args()).run()


if __name__ == "__main__":
    main()
