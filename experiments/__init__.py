"""pubsublab: experiments."""
