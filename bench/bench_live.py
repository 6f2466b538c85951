"""What the live view costs a turn: capturing output with the live log teed, against capturing it alone.

A turn's stdout is drained into a `CappedStream` (head, tail, capped log file). With the
live view, every chunk is also cut into lines, turned into display events by the
adapter and appended to the bounded live log. Two floods, 64 KiB chunks as a pipe gives
them: plain text lines (the scripted runtime's `flood`, shown with the default display)
and claude stream-json lines (each parsed as JSON). Prints the median time of each
variant and the ratio against capture alone; also how many bytes the live log kept.

    .venv/bin/python bench/bench_live.py [--mb N] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from agentbox.core.agents import live
from agentbox.core.process import CappedStream
from agentbox.core.runtimes import adapter_for

CHUNK = 1 << 16


def flood(kind: str, size: int) -> list[bytes]:
    if kind == "text":
        line = b"flood " * 10 + b"flood\n"
    else:
        message = {"type": "assistant", "message": {"content": [{"type": "text", "text": "a sentence of text " * 8}]}}
        line = json.dumps(message).encode() + b"\n"
    data = line * (size // len(line))
    return [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)]


def capture(chunks: list[bytes], where: Path, tool: str | None) -> float:
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir()
    writer = live.LiveWriter(where / "turn-1.live", adapter_for(tool).display) if tool else None
    stream = CappedStream(where / "turn-1.log", tee=writer.feed_stdout if writer else None)
    start = time.perf_counter()
    for chunk in chunks:
        stream.feed(chunk)
    stream.close()
    if writer is not None:
        writer.end("ok")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=16)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) / "logs"
        for kind, tool in (("text", "scripted"), ("stream-json", "claude")):
            chunks = flood(kind, args.mb << 20)
            alone, teed = [], []
            for _ in range(args.runs):  # interleaved, so drift hits both alike
                alone.append(capture(chunks, where, None))
                teed.append(capture(chunks, where, tool))
            kept = sum(p.stat().st_size for p in (where / "turn-1.live").iterdir())
            base, with_live = statistics.median(alone), statistics.median(teed)
            print(f"{kind:<12} {args.mb} MB: capture {base * 1000:7.1f} ms · with the live view "
                  f"{with_live * 1000:7.1f} ms · ratio {with_live / base:5.2f} · live log kept {kept >> 10} KiB")


if __name__ == "__main__":
    main()
