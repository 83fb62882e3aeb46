"""Sessions against the bundled mock server through the real proxy, and the client they use."""
