"""The emulation machinery: the Mininet network and its teardown, packet capture, link
throttling, leftovers of killed runs, the fidelity check, the machine probe and the SDN
controller process."""
