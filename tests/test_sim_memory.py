"""What a simulated run holds per delivery: its delay samples in a file, its deliveries as
4-byte client numbers, with the same figures as lists would give; a paused state's
samples go back to a file when it is read."""

from __future__ import annotations

import copy
import pickle
import random
import tracemalloc
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nodes.metrics.summary import delay_stats_ms
from nodes.sim.checkpoint import read_state, write_state
from nodes.sim.deliveries import Deliveries
from nodes.sim.samples import CHUNK_SAMPLES, SampleFile


def _filled(values: list[float]) -> SampleFile:
    samples = SampleFile()
    for v in values:
        samples.append(v)
    return samples


def _traced_read(path: Path) -> tuple[Any, int, int]:
    """A paused state read back, with the bytes Python holds after it and at its peak."""
    tracemalloc.start()
    try:
        back = read_state(path)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return back, held, peak


def test_samples_read_back_in_order_from_memory_and_file() -> None:
    rng = random.Random(1)
    values = [rng.expovariate(50.0) for _ in range(3 * CHUNK_SAMPLES + 17)]
    samples = _filled(values)
    assert len(samples) == len(values)
    assert list(samples) == values
    assert np.asarray(samples).tolist() == values
    again = pickle.loads(pickle.dumps(samples))  # a paused run's samples
    assert again == samples and list(again) == values
    assert copy.deepcopy(samples) == samples
    assert samples != _filled(values[:-1])


def test_repeated_samples_are_the_same_as_appends_across_the_spill() -> None:
    """``repeat(v, k)`` (one message's deliveries at one moment) holds what ``k`` appends
    of ``v`` would, in order: runs ending short of, on and past a chunk's end, and one
    longer than a chunk, so the file takes a tail longer than CHUNK_SAMPLES."""
    rng = random.Random(3)
    runs = [(rng.expovariate(50.0), k) for k in (1, 3, 1, 250)]
    runs.append((0.25, CHUNK_SAMPLES - sum(k for _, k in runs)))  # ends on the boundary
    runs += [(0.5, 1), (0.75, CHUNK_SAMPLES - 2), (1.5, 7)]  # one across it
    runs += [(2.5, 2 * CHUNK_SAMPLES + 5), (3.5, 1)]  # longer than a chunk
    runs += [(rng.expovariate(50.0), rng.randrange(1, 400)) for _ in range(200)]
    repeated = SampleFile()
    for value, count in runs:
        repeated.repeat(value, count)
    values = [value for value, count in runs for _ in range(count)]
    assert len(values) > 4 * CHUNK_SAMPLES
    appended = _filled(values)
    assert len(repeated) == len(values)
    assert repeated == appended
    assert list(repeated) == values
    assert np.asarray(repeated).tolist() == values
    assert list(pickle.loads(pickle.dumps(repeated))) == values
    assert delay_stats_ms(repeated) == delay_stats_ms(appended)


def test_delay_figures_from_the_file_are_the_arrays_to_the_last_digit() -> None:
    rng = random.Random(2)
    values = [rng.lognormvariate(-4.0, 1.0) for _ in range(150_000)]  # numpy's path
    assert delay_stats_ms(_filled(values)) == delay_stats_ms(array("d", values))
    few = values[:999]
    assert delay_stats_ms(_filled(few)) == delay_stats_ms(few)
    assert delay_stats_ms(SampleFile()) is None


def test_a_million_samples_hold_under_a_mebibyte_of_memory() -> None:
    tracemalloc.start()
    try:
        samples = _filled([0.001 * i for i in range(1_000_000)])
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(samples) == 1_000_000
    assert held < 2**20, f"{held} bytes held for 8 MB of samples"


def test_deliveries_read_as_lists_of_names_and_hold_4_bytes_each() -> None:
    clients = [f"s{i}" for i in range(1000)]
    got = Deliveries(clients)
    for i in range(3):
        got.of(("p", 1)).append(got.numbers[f"s{i}"])
    got.of(("p", 2)).append(got.numbers["s7"])
    got.of(("p", 2)).append(got.numbers["s7"])  # a duplicate stays visible
    assert got == {("p", 1): ["s0", "s1", "s2"], ("p", 2): ["s7", "s7"]}
    assert got.total() == 5 and len(got) == 2
    tracemalloc.start()
    try:
        many = Deliveries(clients)
        for k in range(100):
            into = many.of(("p", k))
            for i in range(10_000):
                into.append(many.numbers[clients[i % 1000]])
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert many.total() == 1_000_000
    assert held < 5 * 10**6, f"{held} bytes held for a million deliveries"


def test_a_paused_states_samples_read_back_into_their_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A paused state read back: its samples go back to a file, and reading them holds
    them once (as one array they were held twice: the bytes read and the array)."""
    monkeypatch.setenv("PUBSUBLAB_KEY_DIR", str(tmp_path / "key"))
    samples = SampleFile()
    for chunk in range(128):  # 8 M samples, 64 MiB
        for i in range(CHUNK_SAMPLES):
            samples.append(chunk + i / CHUNK_SAMPLES)
    path = tmp_path / "state.pickle"
    write_state({"samples": samples}, path)
    size = 8 * len(samples)
    back, held, peak = _traced_read(path)
    assert held < 2**20, f"{held} bytes held after reading {size} bytes of samples"
    assert peak < 1.5 * size, f"reading {size} bytes of samples took {peak} at its peak"
    assert back["samples"] == samples


def test_a_paused_states_arrays_are_read_one_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many arrays (a peer's bucket runs each): read back, they take their size and
    little more at the peak (read with the pickle, each was held twice until the end)."""
    monkeypatch.setenv("PUBSUBLAB_KEY_DIR", str(tmp_path / "key"))
    runs = [array("q", range(k, k + 65_536)) for k in range(64)]  # 32 MiB
    path = tmp_path / "state.pickle"
    write_state({"runs": runs, "shared": runs[3]}, path)
    size = sum(len(r) * r.itemsize for r in runs)
    back, _, peak = _traced_read(path)
    assert back["runs"] == runs and back["shared"] is back["runs"][3]
    assert peak < 1.25 * size, f"reading {size} bytes of arrays took {peak} at its peak"
