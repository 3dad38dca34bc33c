"""The per-stream cap of the emulated runtime (``rate_mbps`` of an overlay link, LBDD's
``workload.stream_mbps``): a paced link carries its frames at the cap over a real
loopback connection, an unpaced one as fast as the socket takes them; the cap reaches
every agent's links through the broker configs, and bad values are refused."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from experiments.plan import compile_plan
from experiments.runs.brokers import broker_configs
from experiments.spec import load_spec
from nodes.emulated.broker import BrokerConfig
from nodes.emulated.overlay_link import OverlayLink
from nodes.frames import encode
from nodes.logs import JsonlLog
from nodes.messages import Message, MsgType

SLICE = Message(MsgType.DATA, 1, "pub", payload={"index": 0}, body=bytes(65536))


async def _carry(log_path: Path, n_frames: int, rate_mbps: float | None) -> float:
    """Seconds until a receiver on loopback has read ``n_frames`` slices sent over an
    OverlayLink paced to ``rate_mbps``."""
    total = n_frames * len(encode(SLICE))
    got = asyncio.get_running_loop().create_future()

    async def receive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(total)
        got.set_result(time.monotonic())
        writer.close()

    server = await asyncio.start_server(receive, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    log = JsonlLog(log_path, "pub")
    link = OverlayLink("sub", log, rate_mbps=rate_mbps)
    link.attach(writer)
    start = time.monotonic()
    for _ in range(n_frames):
        link.enqueue(SLICE)
    done = await asyncio.wait_for(got, 20.0)
    link.detach()
    server.close()
    log.close()
    return done - start


def test_a_paced_link_carries_its_frames_at_the_cap(tmp_path: Path) -> None:
    n, rate = 24, 40.0
    wire_s = n * len(encode(SLICE)) * 8 / (rate * 1e6)  # 0.31 s at 40 Mbit/s
    paced = asyncio.run(_carry(tmp_path / "paced.jsonl", n, rate))
    free = asyncio.run(_carry(tmp_path / "free.jsonl", n, None))
    # The first frame leaves at once, so n frames take n - 1 slots; a loaded machine only
    # makes it slower, and loopback carries 1.5 MiB far faster than 40 Mbit/s.
    assert wire_s * (n - 1) / n * 0.95 <= paced <= wire_s * 1.6, (paced, wire_s)
    assert free < wire_s / 3, free


def test_the_stream_cap_reaches_every_agent_link(tmp_path: Path) -> None:
    plan = compile_plan(load_spec("lbdd-stream-cap"))
    configs = broker_configs(plan, "lbdd", emulate_link=True, log_dir=tmp_path)
    rates = {nb["rate_mbps"] for c in configs.values() for nb in c["neighbours"].values()}
    assert rates == {18}
    secret = "00" * 16
    parsed = BrokerConfig.from_json({**configs["pc1"], "secret": secret})
    assert {nb.rate_mbps for nb in parsed.neighbours.values()} == {18.0}
    uncapped = broker_configs(compile_plan(load_spec("lbdd-gigabit")), "lbdd",
                              emulate_link=True, log_dir=tmp_path)
    assert all("rate_mbps" not in nb for nb in uncapped["pc1"]["neighbours"].values())


@pytest.mark.parametrize("rate", [0, -1, "fast", True])
def test_a_bad_link_rate_is_refused(tmp_path: Path, rate: object) -> None:
    configs = broker_configs(compile_plan(load_spec("lbdd-stream-cap")), "lbdd",
                             emulate_link=True, log_dir=tmp_path)
    config = configs["pc1"]
    config["neighbours"]["pc2"]["rate_mbps"] = rate
    with pytest.raises(ValueError, match="rate_mbps must be a positive number"):
        BrokerConfig.from_json({**config, "secret": "00" * 16})
