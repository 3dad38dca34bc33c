"""pubsublab: the SDN controller (an os-ken app) for the emulated Open vSwitch switches.

A run's controller writes into ``<run>/controller/`` (schemas in
:mod:`controller.l2_monitor`); the names are here so that the runner and the analysis
can find the files without importing the controller framework.
"""

PORT_STATS_FILE = "port_stats.jsonl"
REGISTRY_FILE = "datapaths.json"
LOG_FILE = "controller.log"

# Defaults of the controller's settings (see controller.l2_monitor for what each bounds).
POLL_S = 1.0
IDLE_TIMEOUT_S = 30
MAX_MACS_PER_DPID = 4096
PACKET_IN_RATE_HZ = 1000.0
