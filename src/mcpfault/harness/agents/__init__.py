"""The task suite and the agents (call-boundary policies) that run it."""
