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

Readings and choices:

- **Who publishes.** The paper has one PC publish and the eleven others subscribe, but
  does not say which: we take the first address it lists (10.3.17.74, ``pc1``). With
  ``n`` subscribers a round uses the first ``n`` other PCs in the paper's order. Every PC
  runs its agent in every round; only subscribers take part in the tree.
- **Rounds.** For each algorithm and each subscriber count: agents started (the complete
  overlay up), then one client per PC that takes part (:mod:`nodes.emulated.client`: the publisher's
  ``bulk-publisher`` role, the subscribers' ``subscriber`` role), the data starting
  ``start_s`` after them. A round ends when every surviving subscriber has every slice.
- **Failure round** (``failure``): the largest count again, the victim's agent and user
  killed (SIGKILL; ``kill_at`` in the simulator) ``at_s`` after the data starts, or at
  ``at_fraction`` of the same algorithm's distribution delay without failure.
- **Metrics** (one clock per round: the runtime's monotonic clock, shared by all Mininet
  hosts, or simulated time). *Distribution delay*: from the publisher's first slice to the
  moment the last surviving subscriber holds every slice. *Rate per subscriber*: its data
  over its own completion time, and a series of Mbit/s per ``rate_bin_s``.
  *Publisher NIC load*: bytes its interface sent during the distribution over what its
  link carries in that time (mean), and the busiest bin (peak); emulated runs read the
  interface's kernel counters (so TCP/IP headers, acknowledgements and heartbeats
  count), simulated runs the DATA frames the agent sent. *Contribution* of a node (the
  paper's ``1/n x copies sent``): DATA slices it sent over the slices of the data, over
  the number of subscribers. *Slice delay* (``delay_ms.notification``): a slice's
  receipt minus its hand-over by the publisher's user. *Failure*: detection is the time
  from the kill until the survivors' heartbeats declared the victim dead (first and
  last); repair, until every orphan (a survivor whose parent was the victim) received a
  slice after its path update; resumes list what each orphan already held; slices
  received twice are the agents' duplicates (never delivered twice).
- **Per-stream limit** (``stream_mbps``). The paper's point-to-point fills the
  publisher's 100 Mbit/s NIC only from six subscribers on, so one of its streams (a Java
  socket between disks) moved less than the NIC. We model that as a rate cap on every
  agent-to-agent connection: the simulator's overlay edges run at most ``stream_mbps``
  while each NIC keeps its rate and serves the streams between their frames (NICs in
  :mod:`nodes.sim.engine`). A rate, not a TCP window: on a LAN's sub-millisecond round trip a
  window cap gives a rate that hangs on the round trip, which the paper does not give.
  In Mininet every broker paces each overlay link's output queue to the cap
  (``rate_mbps`` in its config, :mod:`nodes.emulated.overlay_link`): a frame leaves no sooner
  than its size at the cap after the previous one, and the kernel's HTB still shapes the
  NIC, so capped streams share it as in the simulator. Pacing, not an HTB class per
  connection: the paper's limit was its application's, not its wire's.
- **Checksums.** Emulated subscribers hash every slice (:class:`nodes.workloads.bulkdata.DataLog`);
  a round checks every survivor's checksum against the publisher's and against the
  checksum regenerated here from the seed. The simulator passes the publisher's bytes
  objects along, so there is nothing to check there.
- **Depth sweep.** For each size ``n``: ``trials`` sets of ``n`` random distinct IPv4
  addresses (seeded), the first the publisher; depth and out-degrees of
  :func:`nodes.cores.lbdd.lbdd_tree`; then the first set is simulated end to end (a
  complete overlay, each node's NIC at the topology's link rate) to check that the
  agents build that very tree and deliver every slice exactly once.
"""

# The package's rooms: ``rounds`` (what a round produced and its summary, either runtime),
# ``simulated`` (rounds and the depth sweep in the simulator), ``emulated`` (rounds on a
# live Mininet network).
