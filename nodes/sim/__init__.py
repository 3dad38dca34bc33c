"""The simulated runtime: a deterministic discrete-event simulator hosting the same
routing cores as the broker processes (:mod:`nodes.sim.engine`), its model of a broker's
processing time (:mod:`nodes.sim.processing`), and paused runs (:mod:`nodes.sim.checkpoint`)."""
