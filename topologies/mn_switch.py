"""The switch plain ``mn --custom topologies/custom.py`` needs, known without Mininet:
``pubsublab doctor`` prints it, and the custom file refuses a switch that cannot forward.

With no OpenFlow controller installed, ``mn``'s default switch falls back to an Open vSwitch
bridge on the kernel datapath (``ovsbr``). On a kernel without the OVS module it forwards
nothing: ``--test pingall`` runs for minutes and loses every ping. A Linux bridge forwards
with or without the module, as the runner's ``switch: bridge`` does.
"""

from __future__ import annotations

from pathlib import Path

MN_SWITCH_ARGS = "--switch lxbr --controller none"
OVS_MODULE = Path("/sys/module/openvswitch")  # there once the kernel module is loaded
KERNEL_OVS_SWITCHES = ("default", "ovs", "ovsk", "ovsbr")  # mn's names for OVS switches


def forwards_nothing(switch_opt: str, ovs_module_loaded: bool) -> bool:
    """Whether ``mn --switch SWITCH_OPT`` (as mn holds it after its fallback: ``ovsbr``,
    ``ovs,datapath=user``, ...) is an OVS switch on the kernel datapath with no module."""
    name, _, args = switch_opt.partition(",")
    return (not ovs_module_loaded and name in KERNEL_OVS_SWITCHES
            and "datapath=user" not in args.replace(" ", ""))
