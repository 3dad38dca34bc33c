"""The doctor reports whether a run's processes can be contained in a cgroup (what the
sweep after a killed run relies on), and says what to do where they cannot."""

from __future__ import annotations

import pytest

from experiments.emulation import cgroups
from experiments.emulation.doctor import probe


def _run_cgroup_check() -> dict[str, object]:
    return next(c for c in probe()["checks"] if c["name"] == "run_cgroup")


@pytest.mark.root
def test_doctor_finds_this_machine_can_contain_a_run() -> None:
    check = _run_cgroup_check()
    assert check["ok"] and check["required"], check
    assert "cgroup.kill works" in str(check["detail"])
    mount = cgroups.unified_mount()
    assert mount is not None
    assert not list((mount / cgroups.GROUP_PARENT).glob("doctor-*")), "its test group stays"


def test_without_cgroup2_the_doctor_and_a_run_say_what_to_mount(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroups, "unified_mount", lambda: None)
    check = _run_cgroup_check()
    assert not check["ok"] and check["required"]
    assert "mount -t cgroup2" in str(check["fix"])
    with pytest.raises(RuntimeError, match="mount -t cgroup2"):
        cgroups.RunCgroup.named("any")
