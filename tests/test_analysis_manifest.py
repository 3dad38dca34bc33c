"""``pubsublab analyze`` checks the run folder's manifest before Spark starts: a broken one
is one line (it was a traceback after a minute of Spark), a missing one a warning."""

from __future__ import annotations

from pathlib import Path

import pytest

import analysis.session
from experiments.cli import main

SPARK = "Spark would start here"


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError(SPARK)

    monkeypatch.setattr(analysis.session, "spark_session", refuse)


@pytest.mark.parametrize(("manifest", "says"), [
    ("{not json", "unreadable (JSONDecodeError"),
    ("", "unreadable (JSONDecodeError"),
    ("[1, 2]", "a JSON list, not an object"),
    ('{"nodes": ["b1"]}', "nodes is a list, wanted an object"),
    ('{"nodes": {"brokers": "b1"}}', "nodes.brokers is not a list of names"),
    ('{"spec": "demo"}', "spec is a str, wanted an object"),
])
def test_a_broken_manifest_is_one_line_before_spark(
        tmp_path: Path, no_spark: None, capsys: pytest.CaptureFixture[str],
        manifest: str, says: str) -> None:
    (tmp_path / "manifest.json").write_text(manifest)
    assert main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert SPARK not in err, "the manifest is checked before Spark starts"
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"pubsublab: error: {tmp_path / 'manifest.json'}: {says}"), err


def test_a_folder_without_manifest_is_analysed_with_a_warning(
        tmp_path: Path, no_spark: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(tmp_path)]) == 2  # Spark's stand-in refuses
    warning, error = capsys.readouterr().err.splitlines()
    assert "no manifest.json" in warning and "skipped" in warning
    assert error == f"pubsublab: error: {SPARK}"
