"""Shared fixtures. Tests that need root, Mininet or Open vSwitch carry the ``root`` marker
and fail (never skip) with a message that says what to do when the capability is
missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _check_root() -> None:
    """Fail unless running as root with Mininet importable, iperf3 present and OVS
    running; the message says what to do."""
    if os.geteuid() != 0:
        pytest.fail("this test needs root: run `sudo make test`")
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        pytest.fail("Mininet is not importable: run `sudo make setup` (apt-get install mininet)")
    if not shutil.which("iperf3"):
        pytest.fail("iperf3 missing: run `sudo make setup` (apt-get install iperf3)")
    if subprocess.run(["ovs-vsctl", "--timeout=3", "show"], capture_output=True,
                      check=False).returncode != 0:
        pytest.fail("Open vSwitch is not running: run `sudo make setup` "
                    "(/usr/share/openvswitch/scripts/ovs-ctl start)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Every test that needs root carries the one marker, ``@pytest.mark.root`` (module
    ``pytestmark`` or a class or function decorator); its check runs before any fixture,
    so a class-scoped network is never built without it."""
    if item.get_closest_marker("root") is not None:
        _check_root()


@pytest.fixture(autouse=True, scope="session")
def _own_state_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The suite's paused states are signed with a key of its own, in a folder of its
    own (inherited by the commands it starts), never with the user's: the machine keeps
    no key the suite made, and a test of a foreign key swaps the folder for another."""
    os.environ["PUBSUBLAB_KEY_DIR"] = str(tmp_path_factory.mktemp("pubsublab-state"))


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    d = tmp_path / "runs"
    d.mkdir()
    return d
