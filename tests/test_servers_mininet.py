"""One emulated run spread over two servers (``pubsublab run SPEC --servers ...``): the
second server is real to Mininet's cluster edition, an OpenSSH server in a network
namespace of its own with its own address, its own host key and root's key for this
run only, so every remote node, tunnel end and process goes through SSH as it would to
another machine. The demo placed across the two delivers exactly what it delivers on
one server, its wire and logs agree, the manifest names every cross-server link and
what carries it, and nothing of the run is left on either server: after the run, and
after the runner is killed outright and the next run has swept."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_teardown import _RunProcesses, _wait_for

from experiments.emulation.cgroups import unified_mount
from experiments.emulation.cluster import REMOTE_STATE, Servers, control_paths
from experiments.emulation.server_checks import check_server, clock_offset_ms, first_failure
from experiments.plan import compile_plan
from experiments.runs.manifest import code_fingerprint
from experiments.spec import load_spec
from topologies.placement import cross_server_links

pytestmark = pytest.mark.root

NETNS = "plsrv"  # the second server's network namespace
VETH = ("plsv0", "plsv1")  # this machine's end, the server's end
HERE_IP, SERVER_IP = "10.254.7.1", "10.254.7.2"
SSHD = Path("/usr/sbin/sshd")
# One algorithm and one link check keep the test short; the placement is the demo's.
DEMO = ["--set", "routing.algorithms=[snr]", "--set", "fidelity.links=1"]


@dataclass(frozen=True)
class Server:
    address: str
    ssh_config: Path

    def ssh(self, command: str) -> str:
        return subprocess.run(["ssh", "-F", str(self.ssh_config), f"root@{self.address}",
                               command], capture_output=True, text=True, timeout=30,
                              check=True).stdout


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A second server: sshd in namespace NETNS (entered with nsenter, not ``ip netns
    exec``, so that it keeps the cgroup mounts of a real server's root namespace)."""
    if not SSHD.exists() or shutil.which("sudo") is None:
        pytest.fail("the two-server test needs an SSH server and sudo (Mininet's cluster "
                    "edition runs its remote commands through sudo): run `sudo make setup` "
                    "(apt-get install openssh-server sudo)")
    d = tmp_path / "server"
    d.mkdir()
    for key in ("client_key", "host_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)],
                       check=True)
    (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
    host_key = (d / "host_key.pub").read_text().split()[:2]
    (d / "known_hosts").write_text(f"{SERVER_IP} {' '.join(host_key)}\n")
    (d / "sshd_config").write_text(
        f"ListenAddress {SERVER_IP}\nHostKey {d / 'host_key'}\nPermitRootLogin "
        f"prohibit-password\nAuthorizedKeysFile {d / 'authorized_keys'}\nStrictModes no\n"
        f"UsePAM no\nUseDNS no\nPidFile {d / 'sshd.pid'}\nMaxSessions 100\n"
        "MaxStartups 100:30:200\n")
    (d / "ssh_config").write_text(
        f"Host {SERVER_IP}\n  IdentityFile {d / 'client_key'}\n  UserKnownHostsFile "
        f"{d / 'known_hosts'}\n  StrictHostKeyChecking yes\n  BatchMode yes\n")
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", VETH[0]], capture_output=True, check=False)
    _ip("netns", "add", NETNS)
    sshd = None
    try:
        _ip("link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1])
        _ip("link", "set", VETH[1], "netns", NETNS)
        _ip("addr", "add", f"{HERE_IP}/30", "dev", VETH[0])
        _ip("link", "set", VETH[0], "up")
        _ip("-n", NETNS, "addr", "add", f"{SERVER_IP}/30", "dev", VETH[1])
        _ip("-n", NETNS, "link", "set", VETH[1], "up")
        _ip("-n", NETNS, "link", "set", "lo", "up")
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
        sshd = subprocess.Popen(["nsenter", f"--net=/run/netns/{NETNS}", str(SSHD), "-D",
                                 "-f", str(d / "sshd_config"), "-E", str(d / "sshd.log")])
        srv = Server(SERVER_IP, d / "ssh_config")
        deadline = time.monotonic() + 20
        while True:
            try:
                srv.ssh("true")
                break
            except subprocess.CalledProcessError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield srv
    finally:
        if sshd is not None:
            sshd.terminate()
            sshd.wait(timeout=10)
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", VETH[0]], capture_output=True, check=False)


def _run(out: Path, *extra: str, spec: str = "demo",
         settings: tuple[str, ...] = tuple(DEMO)) -> dict[str, Any]:
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "run", spec, "--out",
                          str(out), *settings, *extra, "--json"],
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def _server_interfaces(srv: Server) -> list[str]:
    """Interfaces in the server's root namespace other than its own two."""
    out = subprocess.run(["ip", "-n", NETNS, "-o", "link", "show"], capture_output=True,
                         text=True, check=True).stdout
    names = [line.split(": ", 2)[1].split("@")[0] for line in out.splitlines()]
    return [n for n in names if n not in ("lo", VETH[1])]


def _assert_server_clean(srv: Server, runner: int) -> None:
    """Nothing of runner's run on the server: no interface, group or pid folder."""
    assert _server_interfaces(srv) == []
    group = f"{runner}-{srv.address}"
    mount = unified_mount()
    assert mount is not None
    assert not (mount / "pubsublab" / group).exists()
    assert not Path(REMOTE_STATE, group).exists()
    assert control_paths(runner) == [], "the runner's shared SSH connections are gone"


def test_the_demo_across_two_servers_delivers_as_on_one(tmp_path: Path,
                                                       server: Server) -> None:
    servers = f"localhost,{server.address}"
    across = _run(tmp_path / "two", "--servers", servers, "--ssh-config",
                  str(server.ssh_config))
    alone = _run(tmp_path / "one")
    run_dir = Path(across["run_dir"])
    assert across["status"] == alone["status"] == "ok"
    two, one = (json.loads((Path(r["run_dir"]) / "snr" / "summary.json").read_text())
                for r in (across, alone))
    # The oracle's set, exactly once, in both: so the same deliveries.
    for s in (two, one):
        assert s["missing"] == s["duplicates"] == s["unexpected"] == 0
        assert s["client_failures"] == {}
    assert two["expected_deliveries"] == one["expected_deliveries"] > 1000
    assert two["delivered"] == one["delivered"] == one["expected_deliveries"]
    # The scheduled throttle of b0-b1 reached both ends, b1's on the other server.
    (change,) = two["link_schedule"]
    assert "error" not in change and abs(change["applied_at_s"] - 2.0) < 0.5, change

    # The manifest names where every node ran and every link that crossed servers.
    manifest = json.loads((run_dir / "manifest.json").read_text())
    plan = compile_plan(load_spec("demo", ["servers=[" + servers + "]"]))
    placed = manifest["servers"]["placement"]
    assert set(placed) == {"localhost", server.address}
    assert all(row["nodes"] for row in placed.values()), "both servers hold brokers"
    crossing = {(r["a"], r["b"]) for r in manifest["links"] if r["crosses_servers"]}
    assert crossing == set(cross_server_links(plan.graph, plan.placement)) != set()
    for row in manifest["links"]:
        assert row["mechanism"]["bw_mbps"] == "htb"
        assert ("tunnel" in row["mechanism"]) == row["crosses_servers"], row
    # Each server's idle CPU was sampled, and the verdict holds only if both held.
    idle = manifest["fidelity"]["cpu_idle"]
    assert idle["per_second_pct"] and idle["servers"][server.address]["per_second_pct"]
    # The remote brokers' and clients' CPU, from the run's group on the server.
    assert idle["servers"][server.address]["run_group"]["cpu_s"] > 0.5
    assert across["fidelity_verdict"]["cpu_idle"]["servers"][server.address] is not None
    # The remote brokers really ran there: their status files name the server's pids,
    # which their group on the server held (their log is in the shared run folder).
    remote = set(placed[server.address]["nodes"])
    statuses = {b: json.loads((run_dir / "snr" / f"{b}.status.json").read_text())
                for b in remote}
    assert all(st["state"] == "stopped" for st in statuses.values()), statuses

    analysis = subprocess.run([sys.executable, "-m", "experiments.cli", "analyze",
                               str(run_dir), "--json"], capture_output=True, text=True,
                              timeout=600, check=False)
    assert analysis.returncode == 0, analysis.stderr
    assert json.loads(analysis.stdout.strip().splitlines()[-1])["wire_check"] == "agree"
    assert _server_interfaces(server) == []
    mount = unified_mount()
    assert mount is not None
    assert not [g for g in (mount / "pubsublab").glob(f"*-{server.address}")], \
        "the run's group on the server is gone"
    assert not list(Path("/tmp").glob("pubsublab-ssh-*")), "no shared SSH connection is left"


def test_a_bulk_transfer_across_two_servers_delivers_and_repairs_as_on_one(
        tmp_path: Path, server: Server) -> None:
    """LBDD's 8 MiB to 11 subscribers and its failure round, the victim (pc7) on the
    other server, so its agent and its subscriber are killed there; the publisher stays
    here, where its interface counters are read."""
    servers = f"localhost,{server.address}"
    settings = ("--set", "workload.subscriber_counts=[11]", "--set", "routing.algorithms=[lbdd]",
                "--set", "scale=0.0009765625", "--set", "fidelity.links=1")
    across = _run(tmp_path / "two", "--servers", servers, "--ssh-config",
                  str(server.ssh_config), spec="lbdd-gigabit", settings=settings)
    alone = _run(tmp_path / "one", spec="lbdd-gigabit", settings=settings)
    manifest = json.loads((Path(across["run_dir"]) / "manifest.json").read_text())
    placed = manifest["servers"]["placement"]
    assert "pc1" in placed["localhost"]["nodes"] and "pc7" in placed[server.address]["nodes"]
    two, one = (json.loads((Path(r["run_dir"]) / "lbdd" / "summary.json").read_text())
                for r in (across, alone))
    for s in (two, one):
        for part in (s, s["failure"]):
            assert part["complete"] and part["checksums_ok"], part
            assert part["missing"] == part["duplicates"] == 0, part
    # The same MD5 tree, so the same copies per agent and the same orphans of pc7.
    assert two["copies_sent"] == one["copies_sent"]
    assert sorted(two["failure"]["orphans"]) == sorted(one["failure"]["orphans"]) != []
    assert _server_interfaces(server) == []


def test_a_run_across_servers_killed_outright_is_swept_on_both(tmp_path: Path,
                                                              server: Server) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.cli", "run", "demo", "--out",
         str(tmp_path / "killed"), *DEMO, "--set", "fidelity.links=0", "--servers",
         f"localhost,{server.address}", "--ssh-config", str(server.ssh_config)],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    _wait_for(proc, "operations over")
    (run_dir,) = (tmp_path / "killed").iterdir()
    run = _RunProcesses(proc.pid, run_dir)
    assert run.count("nodes.emulated.broker") >= 9, run.procs  # the ssh here and the broker there
    os.kill(proc.pid, signal.SIGKILL)  # no finally runs: leftovers stay on both servers
    proc.wait()
    assert run.survivors(), "processes of the killed run should outlive its runner"
    assert server.ssh(f"ls {REMOTE_STATE}").split(), "the killed run's pid files stay there"
    second = subprocess.run(
        [sys.executable, "-m", "experiments.cli", "run", "demo", "--out",
         str(tmp_path / "next"), "--set", "fidelity.links=0", "--set", "workload={}",
         "--set", "link_schedule=[]", "--json"],
        capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0, second.stderr
    assert "cleaned leftovers" in second.stderr and server.address in second.stderr
    assert run.survivors() == {}
    # The server's own namespace stays (its sshd and the sudo of each remote process ran
    # there); every node's namespace goes.
    assert run.namespaces_left() - {os.stat(f"/run/netns/{NETNS}").st_ino} == set()
    _assert_server_clean(server, proc.pid)
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "killed"


def _refused(tmp_path: Path, server: str, ssh_config: Path) -> str:
    """The one line of a run refused for ``server``; no run folder was made."""
    out = tmp_path / "refused"
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "run", "demo", "--out",
                          str(out), *DEMO, "--servers", f"localhost,{server}",
                          "--ssh-config", str(ssh_config)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert not [p for p in out.iterdir() if p.is_dir()], "nothing is built for a refused run"
    return line


def test_a_server_that_cannot_take_its_part_is_refused_in_one_line(tmp_path: Path,
                                                                  server: Server) -> None:
    unreachable = _refused(tmp_path, "10.254.7.3", server.ssh_config)
    assert "server 10.254.7.3: ssh: not reached as root" in unreachable
    assert "ssh-copy-id" in unreachable
    no_key = tmp_path / "no_key_config"
    no_key.write_text(server.ssh_config.read_text().replace("IdentityFile", "IdentityFile "
                                                            "/nonexistent #"))
    assert f"server {server.address}: ssh: not reached" in _refused(tmp_path, server.address,
                                                                     no_key)
    servers = Servers(("localhost", server.address), server.ssh_config)
    checks = {c.name: c for c in check_server(servers, server.address, "sha256:another")}
    code = checks[f"{server.address}: code"]
    assert not code.ok and "sha256:another" in code.detail and "same pubsublab" in code.fix
    assert checks[f"{server.address}: clock"].ok, checks[f"{server.address}: clock"]


class _SkewedServers(Servers):
    """A server here whose clock reads ``SKEW_S`` ahead: every script runs in a local
    shell, with ``date`` answering the skewed time."""

    SKEW_S = 30

    def argv(self, server: str, script: str) -> list[str]:
        skewed = f'echo "$(( $(date +%s) + {self.SKEW_S} )).$(date +%N)"'
        return ["sh", "-c", script.replace("date +%s.%N", skewed)]


def test_a_server_whose_clock_is_off_is_refused() -> None:
    servers = _SkewedServers(("localhost", "skewed"))
    offset_ms, err_ms = clock_offset_ms(servers, "skewed")
    assert abs(offset_ms - 30_000) < 50 and err_ms < 50, (offset_ms, err_ms)
    checks = {c.name: c for c in check_server(servers, "skewed", code_fingerprint())}
    clock = checks["skewed: clock"]
    assert not clock.ok and "allowed: 5 ms" in clock.detail and "NTP" in clock.fix
    assert checks["skewed: code"].ok  # the rest of the server is fine: only the clock fails
    line = first_failure(list(checks.values()))
    assert line is not None and line.startswith("server skewed: clock: +30")
