"""Tests that need a CUDA or HIP device; they skip cleanly without one."""
