"""`pubsublab bench matching`: the index, the numpy scan and the linear scan side by side in
one run, with their ratios, answering alike."""

from __future__ import annotations

from experiments.bench import matching as bench_matching


def test_bench_matching_prints_the_numpy_scan_beside_the_index_with_the_ratio() -> None:
    result = bench_matching.run(sizes=(40, 120), n_notifications=60, churn=30)
    assert sorted(result["modes"]) == ["meghdoot", "octopia"]
    for m in result["modes"].values():
        for r in m["results"]:
            assert r["agree"] is True
            assert 0 <= r["hashed"] <= r["subscriptions"]
            assert r["index_vs_numpy"] == round(r["index_per_s"] / r["numpy_per_s"], 2)
            assert min(r["index_per_s"], r["numpy_per_s"], r["churn_per_s"]) > 0
    table = bench_matching.format_result(result)
    assert "numpy/s" in table and "idx/np" in table and "load average" in table
    assert len([line for line in table.splitlines() if line.startswith(("octopia",
                                                                        "meghdoot"))]) == 4
