"""What surrounds the offload stack in a real engine, simulated deterministically."""
