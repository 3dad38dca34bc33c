"""CPU-limited broker hosts: the spec field and the plan (no root), the cgroup quota a
busy loop meets in Mininet and the manifest's ``cpu_limits`` of a run (root)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from experiments.plan import compile_plan
from experiments.plan_text import format_plan
from experiments.spec import SpecError, load_spec

BUSY = [sys.executable, "-c", "while True: pass"]


def test_spec_field_is_validated_and_carried_by_the_plan() -> None:
    spec = load_spec("flood-demo", ["broker.cpu.b1=0.5", "broker.cpu.a0=0.2"])
    assert spec.broker.cpu == {"a0": 0.2, "b1": 0.5}
    assert spec.to_dict()["broker"]["cpu"] == {"a0": 0.2, "b1": 0.5}
    plan = compile_plan(spec, netem=False)
    assert plan.broker.cpu == {"a0": 0.2, "b1": 0.5}
    assert plan.describe()["broker"]["cpu"] == {"a0": 0.2, "b1": 0.5}
    assert "CPU-limited broker hosts (share of one core; emulated): a0 0.2, b1 0.5" \
        in format_plan(plan)
    assert compile_plan(load_spec("flood-demo"), netem=False).broker.cpu == {}


@pytest.mark.parametrize(("override", "where"), [
    ("broker.cpu.a0=0", "broker.cpu.a0: bad value 0"),
    ("broker.cpu.a0=1.5", "broker.cpu.a0: bad value 1.5"),
    ("broker.cpu.a0=true", "broker.cpu.a0: bad value True"),
    ("broker.cpu=0.5", "broker.cpu: bad value 0.5"),
    ("broker.cpu.A0=0.5", "broker.cpu: bad value 'A0'"),
])
def test_bad_cpu_limits_are_one_line_errors(override: str, where: str) -> None:
    with pytest.raises(SpecError) as exc:
        load_spec("flood-demo", [override])
    assert str(exc.value).startswith(where) and "\n" not in str(exc.value)


def test_plan_refuses_names_that_are_not_brokers() -> None:
    with pytest.raises(SpecError, match=r"broker.cpu: 'zz' is not a broker of topology"):
        compile_plan(load_spec("flood-demo", ["broker.cpu.zz=0.5"]), netem=False)
    spec = load_spec("octopia-subscribers", ["topology.params.mode=switch"])
    switch = next(n for n, k in compile_plan(spec, netem=False).graph.nodes(data="kind")
                  if k == "switch")
    with pytest.raises(SpecError, match="is not a broker"):
        compile_plan(load_spec("octopia-subscribers", ["topology.params.mode=switch",
                                                       f"broker.cpu.{switch}=0.5"]),
                     netem=False)


def _idle_s() -> float:
    """The machine's idle CPU time so far, in seconds summed over its cores."""
    ticks = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    return (int(ticks[3]) + int(ticks[4])) / os.sysconf("SC_CLK_TCK")


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.root
def test_busy_loop_gets_its_share_and_no_more() -> None:
    """A busy loop on a host limited to 0.2 core uses 0.2 +- 0.05 core by the cgroup's
    counters; one on an unlimited host about a whole core, or, on a machine that other
    work keeps busy, whatever was left: it is never held back while a core is idle."""
    from experiments.emulation.doctor import probe
    from experiments.emulation.network import Emulation, cgroup_mount
    from topologies.links import LinkParams
    from topologies.registry import build_graph

    found = probe()
    assert found["mechanisms"]["cpu_limit"], found["checks"]
    g = build_graph("gigabit-cluster", {"n": 2}, LinkParams(bw_mbps=1000))
    emu = Emulation(g, switch="bridge", probe=found, log=lambda _m: None,
                    cpu_limits={"pc1": 0.2})
    try:
        emu.start()
        # A 10 ms period: 2 ms on, 8 ms off, not Mininet's 20 on, 80 off.
        assert emu.cpu_cgroups["pc1"] == {"configured": 0.2, "quota_us": 2000,
                                          "period_us": 10000}
        limited, free = emu.popen("pc1", BUSY), emu.popen("pc2", BUSY)
        time.sleep(0.3)
        c0, i0, t0 = _proc_cpu_s(free.pid), _idle_s(), time.monotonic()
        with emu.cpu_sampler(interval_s=0.5) as sampler:
            time.sleep(3.0)
        dt = time.monotonic() - t0
        free_share = (_proc_cpu_s(free.pid) - c0) / dt
        idle_cores = (_idle_s() - i0) / dt
        row = sampler.summary()["pc1"]
        # Under 0.1 core the period grows so that the quota keeps the kernel's 1 ms minimum.
        emu.set_cpu_share("pc1", 0.05)
        assert emu.cpu_cgroups["pc1"] == {"configured": 0.05, "quota_us": 1000,
                                          "period_us": 20000}
        with pytest.raises(ValueError, match="'pc2' is not a CPU-limited host"):
            emu.set_cpu_share("pc2", 0.5)
    finally:
        emu.stop()
    assert limited.poll() is not None and free.poll() is not None
    assert 0.15 <= row["achieved_max"] <= 0.25, row
    assert 0.15 <= row["achieved_mean"] <= 0.25, row
    assert row["throttled_periods"] > 0.8 * row["periods"] > 0, row
    # A whole core, or all it could get: a free loop leaves no idle core behind.
    assert free_share >= min(0.9, free_share + idle_cores) - 0.1, (free_share, idle_cores)
    for controller in ("cpu", "cpuacct"):
        mount = cgroup_mount(controller)
        assert mount is not None and not (mount / "pc1").exists()


@pytest.mark.root
def test_a_process_started_outside_the_limit_runs_free_in_the_hosts_namespace() -> None:
    """``popen(..., cpu_limited=False)`` on a limited host (the runners' clients): the
    process is in the host's network namespace but not in its cgroup, so a busy loop
    there gets far more than the host's 0.2 core, while one started as a broker is held
    to it."""
    from experiments.emulation.doctor import probe
    from experiments.emulation.network import Emulation
    from topologies.links import LinkParams
    from topologies.registry import build_graph

    g = build_graph("gigabit-cluster", {"n": 2}, LinkParams(bw_mbps=1000))
    emu = Emulation(g, switch="bridge", probe=probe(), log=lambda _m: None,
                    cpu_limits={"pc1": 0.2})
    try:
        emu.start()
        limited, free = emu.popen("pc1", BUSY), emu.popen("pc1", BUSY, cpu_limited=False)
        time.sleep(0.3)  # mnexec joins the namespace (and cgroup) after the fork returns
        host_ns = os.readlink(f"/proc/{emu.net['pc1'].pid}/ns/net")
        namespaces = [os.readlink(f"/proc/{p.pid}/ns/net") for p in (limited, free)]
        groups = [Path(f"/proc/{p.pid}/cgroup").read_text() for p in (limited, free)]
        c0 = [_proc_cpu_s(p.pid) for p in (limited, free)]
        time.sleep(2.0)
        shares = [(_proc_cpu_s(p.pid) - c) / 2.0 for p, c in zip((limited, free), c0,
                                                                 strict=True)]
    finally:
        emu.stop()
    assert namespaces == [host_ns, host_ns]
    assert ":/pc1\n" in groups[0] and ":/pc1\n" not in groups[1], groups
    assert shares[0] <= 0.25 and shares[1] >= 0.45, shares


def test_clients_start_outside_their_brokers_cpu_limit(tmp_path: Path) -> None:
    """The runner starts brokers inside their host's CPU limit and clients outside it
    (the simulator's processing model charges clients nothing)."""
    from experiments.runs.brokers import BrokerRun

    class Hosts:
        def __init__(self) -> None:
            self.started: dict[str, bool] = {}

        def popen(self, host: str, argv: list[str], *, cpu_limited: bool = True,
                  **kw: object) -> object:
            self.started[argv[2]] = cpu_limited
            return object()

    hosts = Hosts()
    run = BrokerRun(hosts, tmp_path)  # type: ignore[arg-type]
    run._start("a0", "nodes.emulated.broker", "a0", {"broker": "a0"})
    run.start_client("c", "a0", {"role": "subscriber"})
    assert hosts.started == {"nodes.emulated.broker": True, "nodes.emulated.client": False}


@pytest.mark.root
def test_run_manifest_records_configured_and_achieved_limits(runs_dir: Path) -> None:
    from experiments.runs.emulated import broker_phase
    from experiments.runs.testbed import run_experiment

    plan = compile_plan(load_spec("flood-demo", [
        "broker.cpu.a0=0.3", "capture.enabled=false", "fidelity.links=0"]))
    run_dir, manifest = run_experiment(plan, runs_dir, phases=(broker_phase(plan),))
    assert manifest["status"] == "ok"
    on_disk = json.loads((run_dir / "manifest.json").read_text())
    row = on_disk["cpu_limits"]["a0"]
    assert set(on_disk["cpu_limits"]) == {"a0"}
    assert row["configured"] == 0.3 and (row["quota_us"], row["period_us"]) == (3000, 10000), row
    assert row["windows"] and 0 < row["achieved_max"] <= 0.3 + 0.05, row
    assert row["sampled_s"] >= plan.phase_s(), row
    assert on_disk["plan"]["broker"]["cpu"] == {"a0": 0.3}
    assert on_disk["probe"]["mechanisms"]["cpu_limit"]


@pytest.mark.root
def test_run_refuses_cpu_limits_where_the_probe_says_no(runs_dir: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec asking for CPU limits fails before anything starts on a machine without."""
    from experiments.emulation import doctor
    from experiments.runs import testbed

    real = doctor.probe()
    checks = [c if c["name"] != "cpu_limit" else
              {**c, "ok": False, "detail": "no cgroup v1 cpu and cpuacct controllers mounted",
               "fix": "boot with systemd.unified_cgroup_hierarchy=0"} for c in real["checks"]]
    fake = {**real, "checks": checks, "mechanisms": {**real["mechanisms"], "cpu_limit": None}}
    monkeypatch.setattr(testbed, "probe", lambda: fake)
    plan = compile_plan(load_spec("flood-demo", ["broker.cpu.a0=0.3"]))
    with pytest.raises(RuntimeError, match=r"broker.cpu: this machine cannot CPU-limit hosts "
                                           r"\(no cgroup v1.*unified_cgroup_hierarchy=0"):
        testbed.run_experiment(plan, runs_dir)
    assert not list(runs_dir.iterdir())  # no run folder: nothing started


def test_timeouts_stretch_around_a_cpu_limited_broker(tmp_path: Path) -> None:
    """OctopiA's overwhelmed i1 runs on 0.007 core: it, its eight neighbours and its
    clients wait 1/0.007 times the default dial, keepalive, HELLO and body timeouts (at the defaults
    its neighbours declared it dead and the notifications queued to it were lost); every
    other broker keeps the defaults, and the broker reads the keepalive timeout."""
    from experiments.runs.brokers import BrokerRun, broker_configs
    from nodes.emulated.admission import BODY_TIMEOUT_S, HELLO_TIMEOUT_S
    from nodes.emulated.broker import CONNECT_TIMEOUT_S, LINK_TIMEOUT_S, BrokerConfig

    plan = compile_plan(load_spec("octopia-burst-overwhelmed"))
    configs = broker_configs(plan, "snr", emulate_link=True, log_dir=tmp_path)
    stretched = {b for b, c in configs.items() if "link_timeout_s" in c}
    assert stretched == {"i1", *plan.overlay.neighbors("i1")}
    assert configs["i1"]["link_timeout_s"] == pytest.approx(LINK_TIMEOUT_S / 0.007, abs=0.01)
    assert configs["h1"]["connect_timeout_s"] == pytest.approx(CONNECT_TIMEOUT_S / 0.007,
                                                               abs=0.01)
    parsed = BrokerConfig.from_json({**configs["h1"], "secret": "00" * 16})
    assert parsed.link_timeout_s == configs["h1"]["link_timeout_s"]
    # a HELLO or a large body is read as slowly as the rest
    assert parsed.limits.hello_timeout_s == pytest.approx(HELLO_TIMEOUT_S / 0.007, abs=0.01)
    assert parsed.limits.body_timeout_s == pytest.approx(BODY_TIMEOUT_S / 0.007, abs=0.01)
    default = BrokerConfig.from_json({**configs["a0"], "secret": "00" * 16})
    assert (default.link_timeout_s, default.connect_timeout_s) == (LINK_TIMEOUT_S,
                                                                   CONNECT_TIMEOUT_S)

    class Hosts:
        def __init__(self) -> None:
            self.cpu_limits = {"i1": 0.007}

    run = BrokerRun(Hosts(), tmp_path)  # type: ignore[arg-type]
    assert run._client_config("i1")["connect_timeout_s"] == configs["i1"]["connect_timeout_s"]
    assert "connect_timeout_s" not in run._client_config("a0")
