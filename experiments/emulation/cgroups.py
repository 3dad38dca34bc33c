"""The control groups of a run: one cgroup v2 group holding every process the run starts,
and the cgroup v1 groups Mininet makes for CPU-limited hosts.

Why a group per run. Processes on Mininet hosts are started through ``mnexec -da``, which
puts them in a session of their own: when the runner is killed outright (SIGKILL, the OOM
killer, a crash) nothing ends them, and recording them by pid and command line misses
some (for a moment after the start /proc shows ``mnexec ...`` or nothing) and every
process they fork. A cgroup is inherited by every child at fork, is left only by writing
a cgroup file, and lists its members however they were started. So the runner moves
itself into ``<cgroup2 mount>/pubsublab/<runner pid>`` before it starts anything: the
controller, the host shells and, through them, brokers, clients, tcpdump and iperf3 are
all members. The run's state file (:mod:`experiments.emulation.leftovers`) names the
group; the next run's sweep ends every member with one write to ``cgroup.kill`` and
removes the group.

Why cgroup v2. It tracks membership with no controller enabled, so it is independent of
the v1 ``cpu``/``cpuacct``/``cpuset`` groups Mininet moves CPU-limited hosts' processes
into (a process is in one group per hierarchy). Ubuntu 22.04, the lab VM, has only v2
(at /sys/fs/cgroup); machines with v1 controllers mount it at /sys/fs/cgroup/unified.
``cgroup.kill`` kills every member in the kernel, including one forking at that moment,
where reading the member list and then killing each pid would race with forks and pid
reuse.

What the machine must have: a mounted cgroup2 hierarchy, Linux 5.14 or newer (for
``cgroup.kill``), and root. ``pubsublab doctor`` checks it (``run_cgroup``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Collection
from pathlib import Path

GROUP_PARENT = "pubsublab"  # every run's group is a child of this one
# The v1 hierarchies Mininet's CPULimitedHost makes a group in, named after the host.
HOST_CONTROLLERS = ("cpu", "cpuacct", "cpuset")


def _mounts(fstype: str) -> list[tuple[Path, list[str]]]:
    """(mount point, options) of every mount of ``fstype``."""
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return []
    return [(Path(parts[1]), parts[3].split(",")) for parts in map(str.split, lines)
            if len(parts) >= 4 and parts[2] == fstype]


def cgroup_mount(controller: str) -> Path | None:
    """Where the cgroup v1 hierarchy holding ``controller`` is mounted (None: nowhere)."""
    return next((path for path, opts in _mounts("cgroup") if controller in opts), None)


def unified_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (None: nowhere)."""
    return next((path for path, _ in _mounts("cgroup2")), None)


def remove_host_groups(hosts: Collection[str]) -> list[str]:
    """Remove the v1 groups Mininet made for CPU-limited ``hosts`` that are left and empty
    (a group goes with rmdir once its tasks are gone); those removed, as ``cpu:/<host>``."""
    removed = []
    for controller in HOST_CONTROLLERS:
        mount = cgroup_mount(controller)
        if mount is None:
            continue
        for host in hosts:
            if (mount / host).is_dir():
                with contextlib.suppress(OSError):
                    os.rmdir(mount / host)
                    removed.append(f"{controller}:/{host}")
    return removed


class RunCgroup:
    """The cgroup v2 group of one run: a directory of the cgroup2 hierarchy."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._came_from: Path | None = None

    @classmethod
    def named(cls, name: str) -> RunCgroup:
        """The group ``pubsublab/<name>``, not made yet (:meth:`make`); RuntimeError
        saying what to do if no cgroup2 hierarchy is mounted."""
        mount = unified_mount()
        if mount is None:
            raise RuntimeError("no cgroup2 hierarchy is mounted, so a run's processes cannot "
                               "be contained: mount -t cgroup2 none /sys/fs/cgroup/unified "
                               "(see pubsublab doctor)")
        return cls(mount / GROUP_PARENT / name)

    def make(self) -> None:
        """Make the group; RuntimeError saying what the machine lacks if it cannot, or if
        it exists (a dead run's group the sweep could not remove)."""
        try:
            self.path.parent.mkdir(exist_ok=True)
            self.path.mkdir()
        except OSError as exc:
            raise RuntimeError(f"cannot make the run's cgroup {self.path}: "
                               f"{exc.strerror or exc}") from None
        if not (self.path / "cgroup.kill").exists():
            os.rmdir(self.path)
            raise RuntimeError(f"cgroup {self.path} has no cgroup.kill: Linux 5.14 or newer "
                               "is needed to contain a run's processes")

    def add(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into the group; the children it starts
        from then on are members too."""
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def enter(self) -> None:
        """Move this process into the group, remembering the group it leaves."""
        here = Path("/proc/self/cgroup").read_text().splitlines()
        rel = next(line[3:] for line in here if line.startswith("0::"))
        self._came_from = self.path.parents[1] / rel.lstrip("/")
        self.add(os.getpid())

    def leave(self) -> None:
        """Move this process back where :meth:`enter` found it (to the hierarchy's root if
        that group is gone); the processes it started stay members."""
        root = self.path.parents[1]
        for group in (self._came_from or root, root):  # the root always takes a process
            try:
                (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
                return
            except OSError:
                continue

    def members(self) -> list[int]:
        """The pids in the group (none once it is removed)."""
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def _populated(self) -> bool:
        events = (self.path / "cgroup.events").read_text().split()
        return events[events.index("populated") + 1] != "0"

    def kill(self, timeout_s: float = 5.0) -> int:
        """SIGKILL every member and wait (at most ``timeout_s``) until they are gone; how
        many there were. RuntimeError if some outlive the wait (a process in
        uninterruptible sleep dies only when it wakes)."""
        if not self.path.is_dir():
            return 0
        count = len(self.members())
        (self.path / "cgroup.kill").write_text("1\n")
        deadline = time.monotonic() + timeout_s
        while self._populated():
            if time.monotonic() > deadline:
                raise RuntimeError(f"cgroup {self.path}: processes {self.members()} still "
                                   f"running {timeout_s:g} s after SIGKILL")
            time.sleep(0.01)
        return count

    def remove(self) -> None:
        """Remove the (empty) group; nothing if it is gone already."""
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(self.path)
