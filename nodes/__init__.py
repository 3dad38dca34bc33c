"""pubsublab: nodes."""
