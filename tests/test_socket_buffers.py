"""Every connection of an emulated run has bounded kernel buffers (issue: a broker behind
its publishers found its backlog in megabytes of socket buffers, out of reach of its
bounded queues and backpressure). Real brokers and a real client on loopback: the kernel's
own accounting (``ss -m``: ``rb`` and ``tb``, which Linux doubles from what is set) shows
each end of each overlay and client connection holding what the configs say, and the plan
gives every stock run the stated default and bulk rounds the kernel's own."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from test_broker import SUBSCRIPTION, Overlay, Spawn, spawn, stop_all  # noqa: F401 - fixture

from experiments.plan import compile_plan
from experiments.runs.brokers import socket_buffers
from experiments.spec import SpecError, load_spec
from nodes.emulated.runtime import DEFAULT_BUFFER_BYTES

SEND_BYTES, RECV_BYTES = 65536, 32768  # unlike each other and the kernel's defaults


def _skmem(ports: set[int]) -> list[tuple[str, str, dict[str, int]]]:
    """(local, peer, skmem counters) of every established TCP connection with an end on
    one of ``ports``."""
    out = subprocess.run(["ss", "-tmnH", "state", "established"], capture_output=True,
                         text=True, check=True).stdout
    rows, current = [], None
    for line in out.splitlines():
        if "skmem:(" in line and current is not None:
            mem = dict((k, int(v)) for k, v in re.findall(r"([a-z]+)(\d+)", line.split(
                "skmem:(", 1)[1].split(")", 1)[0]))
            rows.append((*current, mem))
            current = None
        parts = line.split()
        if len(parts) >= 4 and ":" in parts[2]:
            current = (parts[2], parts[3])
    return [r for r in rows if {int(r[0].rsplit(":", 1)[1]), int(r[1].rsplit(":", 1)[1])}
            & ports]


def test_every_connection_holds_the_configured_kernel_buffers(tmp_path: Path,
                                                              spawn: Spawn) -> None:  # noqa: F811
    buffers = {"write_buffer_bytes": SEND_BYTES, "read_buffer_bytes": RECV_BYTES}
    ov = Overlay(tmp_path, [("a", "z")], **buffers)
    procs = [spawn("nodes.emulated.broker", ov.config(b)) for b in ("a", "z")]
    ov.wait_up("a", "z")
    start = time.time() + 0.2
    sub = spawn("nodes.emulated.client", {**ov.client("s", "a", start, 30.0, role="subscriber",
                                                      subscribe=SUBSCRIPTION), **buffers})
    ports = {ov.addr["a"][1], ov.addr["z"][1]}
    deadline = time.monotonic() + 15
    while len(rows := _skmem(ports)) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)  # the overlay link and the client's, each seen from both ends
    try:
        assert len(rows) == 4, rows
        for local, peer, mem in rows:
            # Linux doubles a set size for its own bookkeeping: what ss shows is twice it.
            assert mem["rb"] == 2 * RECV_BYTES and mem["tb"] == 2 * SEND_BYTES, (local, peer,
                                                                                 mem)
    finally:
        sub.terminate()
        sub.wait(timeout=10)
        stop_all(procs)


def test_a_run_bounds_its_buffers_by_default_and_bulk_rounds_keep_the_kernels() -> None:
    stock = compile_plan(load_spec("flood-demo"))
    assert socket_buffers(stock) == {"write_buffer_bytes": DEFAULT_BUFFER_BYTES,
                                     "read_buffer_bytes": DEFAULT_BUFFER_BYTES}
    assert socket_buffers(compile_plan(load_spec("flood-demo", [
        "broker.read_buffer_bytes=kernel", "broker.write_buffer_bytes=4096"]))) == {
        "write_buffer_bytes": 4096, "read_buffer_bytes": None}
    bulk = compile_plan(load_spec("lbdd-gigabit"))
    assert socket_buffers(bulk) == {"write_buffer_bytes": None, "read_buffer_bytes": None}
    # The resolved spec of a run that sets neither reads as before they existed, so the
    # finished points that ship still match their specs.
    assert "read_buffer_bytes" not in stock.spec.to_dict()["broker"]


@pytest.mark.parametrize("value", ["huge", 512, -1, True, 2.5])
def test_a_bad_buffer_size_is_one_line_naming_the_field(value: object) -> None:
    with pytest.raises(SpecError, match=r"^broker.read_buffer_bytes: bad value .*kernel"):
        load_spec("flood-demo", [f"broker.read_buffer_bytes={value}"])
