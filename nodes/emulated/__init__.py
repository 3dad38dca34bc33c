"""The emulated runtime: one broker process per Mininet host (the routing core behind
TCP overlay links with real output queues), the client processes, and what guards them
(the run's secret, admission limits)."""
