"""pubsublab: analysis."""
