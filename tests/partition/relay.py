"""A TCP relay that delays every byte by a fixed time, each direction: the latency a kernel
without ``netem`` cannot add (issue 35 part 8). Run inside a namespace::

    python -m tests.partition.relay --listen 10.213.3.2:6379 --to 127.0.0.1:6380 --delay 0.2

It starts with no delay; SIGUSR1 turns the delay on, SIGUSR2 off. Bytes keep their order
(one queue per direction), a chunk read at t is written at t + delay, so a round trip over
the relay costs at least 2 × delay. Either side closing closes the other once its queued bytes
are written."""

from __future__ import annotations

import argparse
import asyncio
import signal
import time


class Relay:
    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.target, self.delay, self.active = target, delay, False

    @property
    def now_delay(self) -> float:
        return self.delay if self.active else 0.0

    async def pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            while True:
                data = await reader.read(65536)
                queue.put_nowait((time.monotonic() + self.now_delay, data))
                if not data:
                    break
            await sender
        except (ConnectionError, OSError):
            sender.cancel()
        finally:
            writer.close()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self.pipe(reader, up_writer), self.pipe(up_reader, writer),
                             return_exceptions=True)


async def main(listen: tuple[str, int], target: tuple[str, int], delay: float) -> None:
    relay = Relay(target, delay)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, lambda: setattr(relay, "active", True))
    loop.add_signal_handler(signal.SIGUSR2, lambda: setattr(relay, "active", False))
    server = await asyncio.start_server(relay.handle, *listen)
    print("relay ready", flush=True)
    async with server:
        await server.serve_forever()


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", type=_addr, required=True)
    parser.add_argument("--to", type=_addr, required=True)
    parser.add_argument("--delay", type=float, required=True, help="seconds, each direction")
    args = parser.parse_args()
    asyncio.run(main(args.listen, args.to, args.delay))
