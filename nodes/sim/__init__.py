"""The simulated runtime: a deterministic discrete-event simulator hosting the same
routing cores as the broker processes (:mod:`nodes.sim.simulator`), a model-free engine
(:mod:`nodes.sim.engine`: clock, heap, windows, pauses) and its models, each in a module
of its own (links in :mod:`nodes.sim.network` and :mod:`nodes.sim.connections`,
processing in :mod:`nodes.sim.processing` and :mod:`nodes.sim.buffers`, membership,
tallies), the run's settings (:mod:`nodes.sim.settings`), and paused runs
(:mod:`nodes.sim.checkpoint`)."""
