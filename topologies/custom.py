"""The Mininet custom file: ``topos`` for every topology that has a Mininet class.

From the repository root::

    sudo mn --custom topologies/custom.py --topo scot,tree=a-b+b-c,m=3,mode=switch \\
        --switch lxbr --controller none --test pingall

(``--switch lxbr --controller none``: mn's default switch, without a controller, is an OVS
bridge on the kernel datapath, which forwards nothing where the kernel lacks the OVS
module; ``pubsublab doctor`` names these options, and :func:`validate` refuses such a
switch; see :mod:`topologies.mn_switch`.)

``mn`` splits ``--topo NAME,ARG,KEY=VALUE`` on ',' (so tree edges are joined with '+'),
turns numbers into numbers and calls ``topos[NAME](*args, **kwargs)``. The values are the
``Topo`` classes of :mod:`topologies.mininet_topo`, which parse the rest; its docstring
lists the keywords they take besides the registry's parameters
(``pubsublab topo show NAME``).

``mn`` exec's this file without a ``__file__`` and without the repository on ``sys.path``
(its first entry is ``mn``'s own directory), so the file first puts the repository root
there, found from the path ``mn`` compiled it under; imported as ``topologies.custom`` it
leaves ``sys.path`` alone. ``mn`` copies every name the file defines into its own globals,
so it defines only ``topos``, ``validate`` and what it imports.
"""

import inspect
import os
import sys
from optparse import Values

if "__file__" not in globals():  # exec'ed by `mn --custom`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
        inspect.currentframe().f_code.co_filename))))

from mininet.util import buildTopo

from topologies.mininet_topo import (
    GigabitClusterTopo,
    ScotComputeNodesTopo,
    ScotPaperTopo,
    ScotTopo,
)
from topologies.mn_switch import MN_SWITCH_ARGS, OVS_MODULE, forwards_nothing

topos = {
    "scot": ScotTopo,
    "scot-paper": ScotPaperTopo,
    "gigabit-cluster": GigabitClusterTopo,
    "scot-compute-nodes": ScotComputeNodesTopo,
}


def validate(opts: Values) -> None:
    """``mn`` calls a custom file's ``validate`` with its options once it has chosen the
    switch and before it creates anything. A switch that would forward nothing is refused
    here in one line, with the options that work; exiting (not raising, which makes ``mn``
    run its machine-wide cleanup) leaves nothing behind."""
    if not forwards_nothing(opts.switch, OVS_MODULE.exists()):
        return
    if opts.topo.split(",")[0] in topos and not buildTopo(topos, opts.topo).switches():
        return  # overlay mode: hosts and links only, no switch is made
    sys.exit(f"*** --switch {opts.switch}: an Open vSwitch switch on the kernel datapath "
             f"forwards nothing here (the kernel has no openvswitch module); add "
             f"{MN_SWITCH_ARGS} (pubsublab doctor's 'plain mn:' line)")
