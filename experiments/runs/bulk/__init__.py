"""Bulk data distribution runs: LBDD against point-to-point, simulated and in Mininet, and
LBDD's simulated depth sweep (Li et al. 2014, Section 4).

A spec with ``workload.kind: bulk`` (keys and defaults: ``WORKLOADS["bulk"]`` of
:mod:`nodes.workloads.kinds`)::

    data_gb: 8              # the paper's data; a run sends data_gb GiB x scale, at least
                            # one slice (scale 1/128: 64 MiB)
    slice_kb: 64            # the paper's slice size
    topic: bulk
    start_s: 1.0            # the data starts this long after the clients, once joins settled
    publisher: null         # the publisher's broker (null: the first, pc1 = 10.3.17.74)
    subscriber_counts: null # rounds with the first n other brokers subscribing (null: all)
    failure: null           # {victim: pc7, at_s: 2.0 | at_fraction: 0.4, algorithms: [lbdd]}
    rate_bin_s: 1.0         # bins of the per-subscriber rate and NIC load series
    stream_mbps: null       # per-connection rate cap, Mbit/s (null: none)
    sweep_nodes: null       # [100, ..., 500]: the depth sweep instead (simulated only)
    trials: 20              # random IP sets per sweep size

In short: one PC publishes (``pc1`` unless ``publisher`` says otherwise) and the others
subscribe; each algorithm runs one round per subscriber count, then a failure round
(``failure``), or, with ``sweep_nodes``, LBDD's simulated depth sweep instead. One clock
per round gives the distribution delay, the rate per subscriber (Mbit/s per
``rate_bin_s``), the publisher's NIC load, each node's contribution, the slice delay and,
with a failure, detection and repair times. ``stream_mbps`` caps every agent-to-agent
connection (the brokers pace it). Emulated rounds check every survivor's checksum against
the publisher's and the one the seed gives.

Readings and choices in full: docs/design/bulk.md.
"""

# The package's rooms: ``rounds`` (what a round produced and its summary, either runtime),
# ``simulated`` (rounds and the depth sweep in the simulator), ``emulated`` (rounds on a
# live Mininet network).
