"""pubsublab: controller."""
