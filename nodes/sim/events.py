"""The kinds of the simulator's heap entries (:mod:`nodes.sim.engine`), each carried out
by its handler in :mod:`nodes.sim.simulator`."""

# Heap entries are (time_s, seq, kind, a, b); seq is unique, so a and b are never compared.
OP, ARRIVE, TIMER, DEPART, KILL, RATE, DOWN = 0, 1, 2, 3, 4, 5, 6
# Processing model: a broker finishes handling a message (a: broker, b: the core's actions).
DONE = 7
# Links on demand (the last kinds: the loop tests kind >= UP): a side comes up (a: link,
# b: True for the dialler's side), a side is closed by its peer (a: link, b: reason), a
# dial fails (a: dialling broker, b: name).
UP, CLOSE, REFUSE = 8, 9, 10
