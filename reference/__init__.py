"""The reference offload stack: the executable specification kvfault tests against."""
