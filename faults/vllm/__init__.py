"""The ``vllm`` tier (docs/vllm/tier.md): vLLM's real v1 scheduler with LMCache's real
connector and a real lmcache server. Importing the package imports nothing heavy."""
