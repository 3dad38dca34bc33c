"""Capability probe: what this machine can emulate, and what to install where it cannot.

`pubsublab doctor` prints it; the runner calls :func:`probe` to choose mechanisms (the
switch kind, kernel netem or in-broker latency emulation) and stores the result in every
run's manifest.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from topologies.mn_switch import MN_SWITCH_ARGS, OVS_MODULE


@dataclass(frozen=True)
class Check:
    """One capability: whether it is there, what was seen, and the fix when it is not."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def _run(cmd: list[str], timeout_s: float = 10.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)


def _qdisc_supported(kind: str) -> tuple[bool, str]:
    """Try the qdisc on a throw-away dummy interface: the only reliable test, since a
    missing module shows up only as "Specified qdisc kind is unknown" when used."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        return False, "not tested (needs root, ip and tc)"
    dev = "psldoctor0"
    _run(["ip", "link", "del", dev])
    # veth, not dummy: some kernels here lack the dummy driver.
    made = _run(["ip", "link", "add", dev, "type", "veth", "peer", "name", "psldoctor1"])
    if made.returncode != 0:
        return False, f"cannot create a test interface: {made.stderr.strip()}"
    try:
        args = {
            "netem": ["netem", "delay", "1ms"],
            "htb": ["htb", "default", "1"],
            "tbf": ["tbf", "rate", "1mbit", "burst", "32kbit", "latency", "50ms"],
        }[kind]
        res = _run(["tc", "qdisc", "add", "dev", dev, "root", *args])
        return res.returncode == 0, (res.stderr.strip() or "works")
    finally:
        _run(["ip", "link", "del", dev])


def _ovs() -> Check:
    if not shutil.which("ovs-vsctl"):
        return Check("openvswitch", False, "ovs-vsctl not found",
                     "apt-get install openvswitch-switch (sudo make setup does it)")
    res = _run(["ovs-vsctl", "--timeout=3", "show"])
    if res.returncode != 0:
        return Check("openvswitch", False, "installed but ovsdb-server is not running",
                     "/usr/share/openvswitch/scripts/ovs-ctl start (sudo make setup does it)")
    kernel = OVS_MODULE.exists()
    return Check("openvswitch", True,
                 "kernel datapath" if kernel else "userspace datapath (no kernel module)")


def _java() -> Check:
    java = shutil.which("java")
    if not java:
        return Check("java", False, "java not found",
                     "apt-get install openjdk-17-jre-headless (or default-jre-headless)")
    out = _run([java, "-version"]).stderr
    m = re.search(r'version "(\d+)', out)
    major = int(m.group(1)) if m else 0
    return Check("java", major >= 17, f"Java {major}" if major else out.strip()[:80],
                 "" if major >= 17 else "install Java 17 or newer for PySpark 4")


def _mininet() -> Check:
    try:
        from mininet.net import VERSION
    except ImportError:
        return Check("mininet", False, "python module mininet not importable",
                     "apt-get install mininet and make the venv with --system-site-packages")
    return Check("mininet", True, f"Mininet {VERSION}")


CPU_TEST_GROUP = "psldoctorcpu"


def _cpu_limit() -> Check:
    """Whether broker hosts can be CPU-limited (``broker.cpu`` in a spec): Mininet's
    CPULimitedHost needs cgroup v1 ``cpu`` (CFS quota) and ``cpuacct`` (what we measure
    the achieved share with) and cgroup-tools' cgcreate/cgset/cgdelete. The test makes a
    throw-away cgroup, sets a quota, reads it back and the usage counter, deletes it."""
    from experiments.emulation.cgroups import cgroup_mount

    def no(detail: str, fix: str) -> Check:
        return Check("cpu_limit", False, detail, fix, required=False)

    missing = [t for t in ("cgcreate", "cgset", "cgdelete") if not shutil.which(t)]
    if missing:
        return no(f"{', '.join(missing)} not found",
                  "apt-get install cgroup-tools (sudo make setup does it); without it "
                  "specs with broker.cpu are refused")
    cpu, acct = cgroup_mount("cpu"), cgroup_mount("cpuacct")
    if cpu is None or acct is None:
        v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
        return no("no cgroup v1 cpu and cpuacct controllers mounted"
                  + (" (cgroup v2 only)" if v2 else ""),
                  "Mininet 2.3's CPULimitedHost needs cgroup v1: boot with "
                  "systemd.unified_cgroup_hierarchy=0 on the kernel command line; without "
                  "it specs with broker.cpu are refused")
    if os.geteuid() != 0:
        return no("not tested (needs root)", "run pubsublab doctor with sudo")
    group = f"cpu,cpuacct:/{CPU_TEST_GROUP}"
    made = _run(["cgcreate", "-g", group])
    if made.returncode != 0:
        return no(f"cgcreate failed: {made.stderr.strip()[:120]}",
                  "check that /sys/fs/cgroup/cpu is writable (a container needs its own "
                  "cgroup namespace or a privileged mount)")
    try:
        _run(["cgset", "-r", "cpu.cfs_quota_us=20000", f"/{CPU_TEST_GROUP}"])
        quota = (cpu / CPU_TEST_GROUP / "cpu.cfs_quota_us").read_text().strip()
        (acct / CPU_TEST_GROUP / "cpuacct.usage").read_text()
    except OSError as exc:
        return no(f"test cgroup unusable: {exc}", "check the cgroup v1 cpu/cpuacct mounts")
    finally:
        _run(["cgdelete", "-r", group])
    if quota != "20000":
        return no(f"CFS quota not applied (read {quota})",
                  "the kernel needs CONFIG_CFS_BANDWIDTH for CPU limits")
    return Check("cpu_limit", True, f"cgroup v1 CFS quota works ({cpu}, {acct})",
                 required=False)


def _run_cgroup() -> Check:
    """Whether a run's processes can be contained (see :mod:`experiments.emulation.cgroups`):
    a throw-away run group is made, a child process moved into it, and killed with it."""
    from experiments.emulation.cgroups import RunCgroup, unified_mount

    def no(detail: str, fix: str) -> Check:
        return Check("run_cgroup", False, detail, fix)

    if unified_mount() is None:
        return no("no cgroup2 hierarchy mounted", "mount -t cgroup2 none /sys/fs/cgroup/unified "
                  "(systemd mounts it at boot); without it a run killed outright leaves "
                  "processes nothing can find")
    if os.geteuid() != 0:
        return no("not tested (needs root)", "run pubsublab doctor with sudo")
    try:
        group = RunCgroup.named(f"doctor-{os.getpid()}")
        group.make()
    except RuntimeError as exc:
        return no(str(exc), "a kernel of 5.14 or newer with a writable cgroup2 hierarchy "
                            "(a container needs its own cgroup namespace)")
    child = subprocess.Popen(["sleep", "60"])
    try:
        group.add(child.pid)
        killed = group.kill()  # returns once the group is empty: the child is dead
    except (OSError, RuntimeError) as exc:
        child.kill()
        return no(f"test group unusable: {exc}", f"check {group.path}")
    finally:
        child.wait()
        with contextlib.suppress(OSError):
            group.remove()
    if killed != 1:
        return no(f"cgroup.kill ended {killed} processes, not the 1 in the test group",
                  f"check {group.path}")
    return Check("run_cgroup", True, f"cgroup2 at {group.path.parents[1]}, cgroup.kill works")


def _memory_cores() -> list[Check]:
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            mem_kb = int(line.split()[1])
    cores = os.cpu_count() or 1
    return [
        Check("memory", mem_kb > 2 * 1024 * 1024, f"{mem_kb / 1024 / 1024:.1f} GiB available",
              "" if mem_kb > 2 * 1024 * 1024 else "free memory: Spark and 70 hosts need 2 GiB"),
        Check("cores", True, f"{cores} cores", required=False),
    ]


def _tool(name: str, package: str) -> Check:
    path = shutil.which(name)
    fix = "" if path else f"apt-get install {package}"
    return Check(name, bool(path), path or "not found", fix)


def probe() -> dict[str, Any]:
    """Run every check. ``mechanisms`` says what the runner will use because of them."""
    root = os.geteuid() == 0
    checks = [
        Check("root", root, "running as root" if root else f"uid {os.geteuid()}",
              "" if root else "emulated runs need root: use sudo"),
        _mininet(),
        _ovs(),
    ]
    for kind in ("netem", "htb", "tbf"):
        ok, detail = _qdisc_supported(kind)
        fix = {
            "netem": "link delay/loss fall back to in-broker emulation; for kernel netem use "
                     "a kernel with sch_netem (e.g. the Vagrant VM's stock Debian kernel)",
            "htb": "link bandwidth cannot be shaped: load sch_htb",
            "tbf": "load sch_tbf",
        }[kind]
        checks.append(Check(kind, ok, detail, "" if ok else fix, required=kind == "htb"))
    checks += [
        _tool("tcpdump", "tcpdump"),
        _tool("iperf3", "iperf3"),
        _tool("ethtool", "ethtool"),
        _tool("brctl", "bridge-utils"),  # Mininet's LinuxBridge
        _java(),
        _cpu_limit(),
        _run_cgroup(),
        *_memory_cores(),
    ]
    by_name = {c.name: c for c in checks}
    ovs = by_name["openvswitch"]
    mechanisms = {
        "delay_loss": "netem" if by_name["netem"].ok else "in-broker",
        "bandwidth": "htb" if by_name["htb"].ok else "none",
        "ovs_datapath": (
            None if not ovs.ok else ("kernel" if ovs.detail.startswith("kernel") else "user")
        ),
        "cpu_limit": "cgroup cfs" if by_name["cpu_limit"].ok else None,
    }
    return {
        "ok": all(c.ok for c in checks if c.required),
        "checks": [asdict(c) for c in checks],
        "mechanisms": mechanisms,
        "mn_switch_args": MN_SWITCH_ARGS if by_name["brctl"].ok else None,
    }


def format_report(result: dict[str, Any]) -> str:
    """Human-readable table of a probe result."""
    lines = []
    width = max(13, *(len(c["name"]) + 1 for c in result["checks"]))
    for c in result["checks"]:
        mark = "ok " if c["ok"] else ("MISSING" if c["required"] else "no ")
        line = f"{mark:8}{c['name']:{width}}{c['detail']}"
        if c["fix"]:
            line += f"\n{'':{8 + width}}-> {c['fix']}"
        lines.append(line)
    mech = ", ".join(f"{k}={v}" for k, v in result["mechanisms"].items())
    lines.append(f"mechanisms: {mech}")
    if result["mn_switch_args"]:
        lines.append("plain mn:   sudo mn --custom topologies/custom.py --topo NAME,... "
                     f"{result['mn_switch_args']}")
    return "\n".join(lines)
