"""Packet capture on the broker hosts of a live emulation: one tcpdump per host.

Choices (each recorded in ``pcap/capture.json`` and the run manifest):

- **Where**: inside each broker host's network namespace, on ``any`` with link type
  LINUX_SLL2, which records per packet the interface index and whether the host sent or
  received it; the filter is ``tcp port <overlay port>``: the overlay links and the
  host's own clients on loopback, nothing else (the fidelity iperf3 runs before the
  brokers and stays out). Each host's interfaces (index, name, addresses) are recorded
  so the analysis can name them.
- **When**: started before the brokers and stopped after they exit, so the first HELLO
  and the last FIN are in the files. Start waits until every tcpdump has printed
  "listening on" (its capture is open). After the brokers exit, the kernel may still be
  sending what they wrote (a close is graceful), so stop waits until no file has grown
  for ``QUIET_S`` (at most ``QUIET_MAX_S``), then sends SIGINT.
- **Disk bound**: a ring of files per host (``-C``/``-W``). The run's ``max_mb`` (10^6
  bytes, tcpdump's unit) is split evenly over the hosts, in files of ``file_mb`` (fewer,
  smaller files when a host's share is small; at least one 1 MB file per host, else the
  spec is refused). tcpdump checks a file's size before writing a packet, so a file may
  exceed its size by one record: the bound stated is files x (size + one record). When a
  host's share is used up its oldest file is overwritten: the run goes on, and the record
  says how many packets were overwritten (tcpdump's "captured" minus the packets still in
  the files), besides tcpdump's own "dropped by kernel" count.
- ``-U`` writes every packet as it is captured (the quiet test watches file sizes, and a
  tcpdump killed outright loses nothing already captured); ``-Z root`` keeps root,
  because Debian's tcpdump otherwise drops to its own user before opening files in a
  root-owned run folder; ``-n``: no name lookups.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from analysis.pcap import PcapError, count_records
from experiments.emulation.network import Emulation
from experiments.spec import CaptureSpec, SpecError

READY_TIMEOUT_S = 10.0
QUIET_S = 0.5
QUIET_MAX_S = 10.0
STOP_TIMEOUT_S = 10.0
_FILE_OVERHEAD = 24 + 16  # pcap global header, and the header of the record past the size
_STAT_RE = re.compile(r"^(\d+) packets? (.+)$")


@dataclass(frozen=True)
class CapturePlan:
    """What each host's tcpdump is told, derived from the spec's capture settings."""

    hosts: tuple[str, ...]
    port: int
    snaplen: int
    file_mb: int
    files_per_host: int
    max_mb: float

    @property
    def bound_bytes(self) -> int:
        """The most the capture files of one algorithm's run can take on disk."""
        per_file = self.file_mb * 1_000_000 + _FILE_OVERHEAD + self.snaplen
        return len(self.hosts) * self.files_per_host * per_file

    @property
    def bpf_filter(self) -> str:
        return f"tcp port {self.port}"

    def describe(self) -> dict[str, Any]:
        """The plan as plain data, for the manifest."""
        return {"enabled": True, "snaplen": self.snaplen, "max_mb": self.max_mb,
                "file_mb": self.file_mb, "files_per_host": self.files_per_host,
                "hosts": list(self.hosts), "filter": self.bpf_filter,
                "interface": "any (LINUX_SLL2)", "bound_bytes": self.bound_bytes}


def plan_capture(settings: CaptureSpec, hosts: list[str], port: int) -> CapturePlan:
    """Split ``settings.max_mb`` over ``hosts`` so that files x (size + one record) fit;
    SpecError when a host's share cannot hold one file of 1 MB."""
    per_host = settings.max_mb * 1e6 / max(1, len(hosts))
    slack = _FILE_OVERHEAD + settings.snaplen
    if per_host < 1e6 + slack:
        need = len(hosts) * (1e6 + slack) / 1e6
        raise SpecError(f"capture.max_mb: {settings.max_mb} MB cannot hold one 1 MB file "
                        f"(tcpdump's smallest) for each of {len(hosts)} broker hosts; raise it "
                        f"to at least {need:.1f} or set capture.enabled: false")
    # Two files at least where the share allows, so rotation keeps the newest data.
    file_mb = min(settings.file_mb, max(1, int((per_host / 2 - slack) // 1e6)))
    return CapturePlan(tuple(hosts), port, settings.snaplen, file_mb,
                       int(per_host // (file_mb * 1e6 + slack)), settings.max_mb)


def parse_tcpdump_stats(text: str) -> dict[str, int]:
    """tcpdump's closing counters ("12 packets captured", ...) keyed by what they count."""
    stats = {}
    for line in text.splitlines():
        m = _STAT_RE.match(line.strip())
        if m:
            stats[m.group(2).replace(" ", "_")] = int(m.group(1))
    return stats


class Capture:
    """tcpdump on every host of a :class:`CapturePlan`, as a context manager: entered
    once all captures listen, left (even on error) after writing ``capture.json``."""

    def __init__(self, emu: Emulation, plan: CapturePlan, out_dir: Path, log: Any) -> None:
        self.emu = emu
        self.plan = plan
        self.out_dir = out_dir
        self.log = log
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.interfaces: dict[str, dict[str, Any]] = {}

    def _stderr(self, host: str) -> Path:
        return self.out_dir / f"{host}.tcpdump.log"

    def files(self, host: str) -> list[Path]:
        return sorted(self.out_dir.glob(f"{host}.pcap*"))

    def __enter__(self) -> Capture:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        p = self.plan
        try:
            for host in p.hosts:
                self.interfaces[host] = self._interfaces(host)
                with open(self._stderr(host), "wb") as err:
                    self.procs[host] = self.emu.popen(host, [
                        "tcpdump", "-i", "any", "-y", "LINUX_SLL2", "-n", "-U", "-Z", "root",
                        "-s", str(p.snaplen), "-C", str(p.file_mb), "-W", str(p.files_per_host),
                        "-w", str(self.out_dir / f"{host}.pcap"), p.bpf_filter],
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
            self._wait_listening()
        except BaseException:
            self._stop()
            raise
        return self

    def _interfaces(self, host: str) -> dict[str, Any]:
        proc = self.emu.popen(host, ["ip", "-j", "addr", "show"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=10)
        if proc.returncode != 0:
            raise RuntimeError(f"capture: `ip addr` on {host} failed: {err.decode().strip()}")
        return {str(i["ifindex"]): {"name": i["ifname"],
                                    "addrs": [a["local"] for a in i.get("addr_info", [])]}
                for i in json.loads(out)}

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = set(self.procs)
        while waiting:
            for host in sorted(waiting):
                text = self._stderr(host).read_text(errors="replace")
                if "listening on" in text:
                    waiting.discard(host)
                elif self.procs[host].poll() is not None:
                    raise RuntimeError(f"capture: tcpdump on {host} exited: {text.strip()}")
            if waiting and time.monotonic() > deadline:
                raise RuntimeError(f"capture: tcpdump not listening after {READY_TIMEOUT_S:.0f} s "
                                   f"on {', '.join(sorted(waiting))}")
            if waiting:
                time.sleep(0.05)

    def _wait_quiet(self) -> float:
        """Seconds until no capture file grew for QUIET_S (bounded by QUIET_MAX_S)."""
        t0 = time.monotonic()
        last, still_since = None, t0
        while time.monotonic() - t0 < QUIET_MAX_S:
            sizes = tuple(f.stat().st_size for h in self.plan.hosts for f in self.files(h))
            now = time.monotonic()
            if sizes != last:
                last, still_since = sizes, now
            elif now - still_since >= QUIET_S:
                break
            time.sleep(0.1)
        return time.monotonic() - t0

    def _stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        quiet_s = self._wait_quiet() if exc_type is None else 0.0
        self._stop()
        record = {**self.plan.describe(), "quiet_wait_s": round(quiet_s, 2),
                  "hosts": {h: self._host_record(h) for h in self.plan.hosts}}
        hosts = record["hosts"].values()
        for key in ("bytes", "packets_in_files", "dropped_by_kernel", "overwritten_packets"):
            record[key] = sum(h.get(key) or 0 for h in hosts)
        (self.out_dir / "capture.json").write_text(json.dumps(record, indent=1, sort_keys=True)
                                                   + "\n")
        if record["dropped_by_kernel"] or record["overwritten_packets"]:
            self.log(f"CAPTURE WARNING: {record['dropped_by_kernel']} packets dropped by the "
                     f"kernel, {record['overwritten_packets']} overwritten by rotation "
                     f"(limit {self.plan.max_mb} MB)")

    def _host_record(self, host: str) -> dict[str, Any]:
        stderr = self._stderr(host)
        stats = parse_tcpdump_stats(stderr.read_text(errors="replace")) if stderr.exists() else {}
        in_files, damage = 0, []
        for f in self.files(host):
            try:
                n, problems = count_records(f)
            except PcapError as exc:
                damage.append(str(exc))
                continue
            in_files += n
            damage += [f"{f.name} byte {off}: {what}" for off, what in problems]
        captured = stats.get("captured")
        return {
            "files": [f.name for f in self.files(host)],
            "bytes": sum(f.stat().st_size for f in self.files(host)),
            "packets_captured": captured, "packets_in_files": in_files,
            "received_by_filter": stats.get("received_by_filter"),
            "dropped_by_kernel": stats.get("dropped_by_kernel"),
            "overwritten_packets": max(0, captured - in_files) if captured is not None else None,
            "file_damage": damage, "interfaces": self.interfaces.get(host, {}),
        }


def manifest_entry(pcap_dir: Path) -> dict[str, Any] | None:
    """What the manifest keeps of one algorithm's capture: the totals, and per host what
    was captured, dropped and overwritten (``capture.json`` has the rest)."""
    try:
        record = json.loads((pcap_dir / "capture.json").read_text())
    except (OSError, ValueError):
        return None
    keys = ("bytes", "packets_captured", "packets_in_files", "dropped_by_kernel",
            "overwritten_packets", "file_damage")
    return {"bytes": record["bytes"], "packets_in_files": record["packets_in_files"],
            "dropped_by_kernel": record["dropped_by_kernel"],
            "overwritten_packets": record["overwritten_packets"],
            "hosts": {h: {k: r.get(k) for k in keys} for h, r in record["hosts"].items()}}
