"""The run's CPU by kind of process (:class:`experiments.emulation.fidelity.IdleSampler`
with ``processes``): a busy process is charged what it used, an idle one nothing. And the
CPU criterion judges the seconds a workload ran, giving the others beside it."""

from __future__ import annotations

import subprocess
import sys
import time

from analysis.fidelity_verdict import fidelity_text, fidelity_verdict
from experiments.emulation.fidelity import IdleSampler, process_cpu_text, process_kind

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n"


def test_a_busy_process_is_charged_its_cpu_and_an_idle_one_nothing() -> None:
    procs: list[subprocess.Popen[bytes]] = []
    with IdleSampler(period_s=0.1, processes=procs) as sampler:
        procs.append(subprocess.Popen([sys.executable, "-c", BUSY]))
        procs.append(subprocess.Popen(["sleep", "3"]))
        procs[0].wait(timeout=30)
        time.sleep(0.3)
    procs[1].kill()
    procs[1].wait()
    by_kind = sampler.summary(35.0)["by_process"]
    assert set(by_kind) == {sys.executable.rsplit("/", 1)[1], "sleep"}
    busy = by_kind[sys.executable.rsplit("/", 1)[1]]
    # its last reading is at most a period (0.1 s) before it ended
    assert busy["processes"] == 1 and 0.8 <= busy["cpu_s"] <= 1.1
    assert by_kind["sleep"]["cpu_s"] <= 0.02
    assert process_cpu_text(by_kind).startswith(f"mean cores: {sys.executable.rsplit('/', 1)[1]} ")


def test_kinds_by_command_line() -> None:
    assert process_kind([sys.executable, "-m", "nodes.emulated.broker", "--config", "b"]
                        ) == "broker"
    assert process_kind(["mnexec", "-g", "h1", "python3", "-m", "nodes.emulated.client"]
                        ) == "clients"
    assert process_kind(["mnexec", "-cd", "-a", "4242", "tcpdump", "-i", "any"]) == "tcpdump"
    assert process_kind(["/usr/bin/iperf3", "-s"]) == "iperf3"
    # a broker on another server: what runs here is its SSH client, counted as such
    assert process_kind(["sudo", "-E", "-u", "root", "ssh", "-q", "root@10.0.0.2", "sh", "-c",
                         "...", "sh", "mnexec", "-a", "77", "python3", "-m",
                         "nodes.emulated.broker"]) == "ssh"


def test_the_criterion_judges_the_seconds_a_workload_ran_and_gives_the_rest() -> None:
    sampler = IdleSampler()
    # Processes starting (3 % idle), the workload (90, then 20 % in its burst), stopping.
    sampler.samples = [(0.0, 1.0, 3.0), (1.0, 2.0, 90.0), (2.0, 3.0, 20.0), (3.0, 4.0, 80.0)]
    judged = sampler.summary(35.0, [[1.5, 2.5]])  # overlaps the second and third samples
    assert judged["per_second_pct"] == [90.0, 20.0] and judged["seconds_below"] == 1
    assert judged["outside_workload"]["per_second_pct"] == [3.0, 80.0]
    assert judged["outside_workload"]["seconds_below"] == 1 and not judged["ok"]
    every = sampler.summary(35.0)  # no workload spans: every second is judged
    assert every["seconds_below"] == 2 and "outside_workload" not in every
    verdict = fidelity_verdict({"links": [{"a": "a", "b": "b", "within_10pct": True}],
                                "cpu_idle": judged})
    assert verdict is not None and verdict["cpu_idle"]["outside_workload"] == {
        "seconds_below": 1, "seconds": 2, "min_pct": 3.0}
    assert fidelity_text(verdict).startswith(
        "fidelity FAILED: CPU idle below 35 % in 1 of 2 s of the workloads (50 %, min 20 %)")
    sampler.samples[2] = (2.0, 3.0, 60.0)
    quiet = fidelity_verdict({"links": [{"a": "a", "b": "b", "within_10pct": True}],
                              "cpu_idle": sampler.summary(35.0, [[1.5, 2.5]])})
    assert quiet is not None and quiet["ok"] is True  # the 3 % while starting is not judged

