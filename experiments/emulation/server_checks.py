"""Whether each server of a run can take its part (``pubsublab doctor --servers``, and the
runner before it builds anything): reachable by SSH as root without a password, the same
pubsublab code and Python at the same path, Mininet's ``mnexec``, ``tc``, ``tcpdump`` and
``sudo`` (which the cluster edition runs its remote commands through), a cgroup2 hierarchy
with ``cgroup.kill``, the run folder's file system shared, and a clock close to this one.

How clocks are compared. A delay is a receive time on one host less a send time on
another, so a server whose clock is off by s adds s to every delay that crosses to it.
One SSH session runs ``date +%s.%N`` once per line it reads; this machine sends
:data:`CLOCK_SAMPLES` lines and, for each, reads the answer. With ``t0`` and ``t1`` the
local send and receive times, the server's clock read at some instant between them, so
its offset is ``remote - (t0 + t1) / 2`` give or take ``(t1 - t0) / 2``; the sample with
the shortest round trip is kept (as NTP does). A server is refused when even the most
favourable end of that interval is further than :data:`MAX_CLOCK_SKEW_MS` from zero: the
delays of these experiments are a few milliseconds per hop, so a larger offset would be
a visible share of them. Servers that run an NTP client on one network keep well inside.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

from experiments.emulation.cluster import Servers
from experiments.emulation.doctor import Check

MAX_CLOCK_SKEW_MS = 5.0
CLOCK_SAMPLES = 7
REPO = Path(__file__).resolve().parents[2]
TOOLS = {"mnexec": "mininet", "tc": "iproute2", "tcpdump": "tcpdump", "sudo": "sudo",
         "ip": "iproute2"}


def _check(name: str, ok: bool, detail: str, fix: str) -> Check:
    return Check(name, ok, detail, "" if ok else fix)


def clock_offset_ms(servers: Servers, server: str) -> tuple[float, float]:
    """The server's clock less this one's, and its uncertainty, in ms (module docstring);
    OSError if the session fails."""
    proc = subprocess.Popen(servers.argv(server, "while read x; do date +%s.%N; done"),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    best: tuple[float, float] | None = None
    try:
        for _ in range(CLOCK_SAMPLES):
            t0 = time.time()
            proc.stdin.write("x\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            t1 = time.time()
            if not line.strip():
                raise OSError("no answer from date")
            offset_ms = (float(line) - (t0 + t1) / 2) * 1e3
            half_rtt_ms = (t1 - t0) / 2 * 1e3
            if best is None or half_rtt_ms < best[1]:
                best = (offset_ms, half_rtt_ms)
    finally:
        proc.stdin.close()
        proc.kill()
        proc.wait()
    assert best is not None
    return best


def _facts(servers: Servers, server: str, share: Path | None) -> dict[str, str]:
    """What the server says of itself, one ``key value`` line each."""
    py = shlex.quote(sys.executable)
    fingerprint = ("from experiments.runs.manifest import code_fingerprint as f; print(f())")
    lines = [
        f"echo \"python $({py} -c 'import sys; print(sys.version.split()[0])' 2>/dev/null)\"",
        f"echo \"code $(cd {shlex.quote(str(REPO))} 2>/dev/null && {py} -c "
        f"{shlex.quote(fingerprint)} 2>/dev/null)\"",
        *(f"echo \"tool_{t} $(command -v {t})\"" for t in TOOLS),
        "echo \"cgroup2 $(awk '$3 == \"cgroup2\" {print $2; exit}' /proc/mounts)\"",
    ]
    if share is not None:
        lines.append(f"echo \"share $(cat {shlex.quote(str(share))} 2>/dev/null)\"")
    res = servers.run(server, "\n".join(lines), timeout_s=60.0)
    if res.returncode != 0:
        raise OSError(res.stderr.strip() or f"ssh exited {res.returncode}")
    return dict(line.partition(" ")[::2] for line in res.stdout.splitlines())


def check_server(servers: Servers, server: str, fingerprint: str,
                 share: tuple[Path, str] | None = None) -> list[Check]:
    """The checks of one remote server (module docstring). ``fingerprint`` is this
    machine's code fingerprint; ``share`` a file this machine wrote in the run folder's
    file system and what it holds, to be read there."""
    fix_ssh = (f"let root here log in as root@{server} with a key and no password "
               "(ssh-copy-id root@SERVER), or name an SSH configuration: --ssh-config FILE")
    try:
        facts = _facts(servers, server, share[0] if share else None)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Check(f"{server}: ssh", False, f"not reached as root ({exc})", fix_ssh)]
    here = sys.version.split()[0]
    checks = [
        _check(f"{server}: ssh", True, "reached as root without a password", ""),
        _check(f"{server}: python", facts.get("python") == here,
              f"{sys.executable} is Python {facts.get('python') or 'missing'} (here {here})",
              f"install the same Python at {sys.executable} there (sudo make setup in "
              f"the same checkout at {REPO})"),
        _check(f"{server}: code", facts.get("code") == fingerprint,
              f"pubsublab at {REPO}: {facts.get('code') or 'missing'} (here {fingerprint})",
              f"check out the same pubsublab revision at {REPO} there"),
        *(_check(f"{server}: {t}", bool(facts.get(f"tool_{t}")), facts.get(f"tool_{t}") or
                "not found", f"apt-get install {pkg} there") for t, pkg in TOOLS.items()),
        _check(f"{server}: cgroup2", bool(facts.get("cgroup2")),
              facts.get("cgroup2") or "no cgroup2 hierarchy mounted",
              "mount -t cgroup2 none /sys/fs/cgroup/unified there (Linux 5.14+)"),
    ]
    if share is not None:
        path, token = share
        checks.append(_check(f"{server}: run folder", facts.get("share") == token,
                            f"{path.parent} {'is' if facts.get('share') == token else 'is not'}"
                            " the same file system there",
                            f"mount the runs folder {path.parent} at the same path there "
                            "(the lab VMs' /vagrant), or pass --out on such a mount"))
    try:
        offset_ms, err_ms = clock_offset_ms(servers, server)
    except (OSError, ValueError) as exc:
        checks.append(_check(f"{server}: clock", False, f"not read ({exc})", fix_ssh))
        return checks
    ok = abs(offset_ms) - err_ms <= MAX_CLOCK_SKEW_MS
    checks.append(_check(f"{server}: clock", ok,
                        f"{offset_ms:+.2f} ms from this one (+/- {err_ms:.2f} ms); allowed: "
                        f"{MAX_CLOCK_SKEW_MS:g} ms",
                        "run an NTP client (chrony) on every server"))
    return checks


def check_servers(servers: Servers, fingerprint: str, runs_dir: Path | None = None
                  ) -> list[Check]:
    """:func:`check_server` of every remote server; with ``runs_dir``, whether it is on a
    file system each of them sees (a token file written here and read there)."""
    import secrets

    checks: list[Check] = []
    token_file = None
    if runs_dir is not None:
        token = secrets.token_hex(8)
        runs_dir.mkdir(parents=True, exist_ok=True)
        token_file = runs_dir / f".servers-check-{token}"
        token_file.write_text(token)
    try:
        for server in servers.remote:
            checks += check_server(servers, server, fingerprint,
                                   (token_file, token) if token_file else None)
    finally:
        if token_file is not None:
            token_file.unlink(missing_ok=True)
    return checks


def first_failure(checks: list[Check]) -> str | None:
    """The one line for the first failed check (None if all pass)."""
    bad = next((c for c in checks if not c.ok), None)
    return None if bad is None else f"server {bad.name}: {bad.detail}: {bad.fix}"

