"""pubsublab: topologies."""
