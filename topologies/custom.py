"""The Mininet custom file: ``topos`` for every topology that has a Mininet class.

From the repository root::

    sudo mn --custom topologies/custom.py --topo scot,tree=a-b+b-c,m=3,mode=switch \\
        --switch lxbr --controller none --test pingall

(``--switch lxbr --controller none``: mn's default switch, without a controller, is an OVS
bridge on the kernel datapath, which forwards nothing where the kernel lacks the OVS
module; ``pubsublab doctor`` names these options.)

``mn`` splits ``--topo NAME,ARG,KEY=VALUE`` on ',' (so tree edges are joined with '+'),
turns numbers into numbers and calls ``topos[NAME](*args, **kwargs)``. The values are the
``Topo`` classes of :mod:`topologies.mininet_topo`, which parse the rest; its docstring
lists the keywords they take besides the registry's parameters
(``pubsublab topo show NAME``).

``mn`` exec's this file without a ``__file__`` and without the repository on ``sys.path``
(its first entry is ``mn``'s own directory), so the file first puts the repository root
there, found from the path ``mn`` compiled it under; imported as ``topologies.custom`` it
leaves ``sys.path`` alone. ``mn`` copies every name the file defines into its own globals,
so it defines only ``topos`` and what it imports.
"""

import inspect
import os
import sys

if "__file__" not in globals():  # exec'ed by `mn --custom`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
        inspect.currentframe().f_code.co_filename))))

from topologies.mininet_topo import (
    GigabitClusterTopo,
    ScotComputeNodesTopo,
    ScotPaperTopo,
    ScotTopo,
)

topos = {
    "scot": ScotTopo,
    "scot-paper": ScotPaperTopo,
    "gigabit-cluster": GigabitClusterTopo,
    "scot-compute-nodes": ScotComputeNodesTopo,
}
