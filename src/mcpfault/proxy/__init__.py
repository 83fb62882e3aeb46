"""The proxy: transports that move bytes, and the sans-IO core that hands each request to the fault engine."""
