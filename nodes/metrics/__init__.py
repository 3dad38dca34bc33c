"""``summary.json``: the figures of one algorithm's run, from the simulator's memory
(:mod:`nodes.metrics.summary`) or from the logs either runtime writes
(:mod:`nodes.metrics.log_summary`)."""
