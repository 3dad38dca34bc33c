"""The runners: each consumes a compiled run plan and leaves a run folder (emulated on a
live Mininet testbed, simulated in the discrete-event simulator, bulk data rounds)."""
