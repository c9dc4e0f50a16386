#!/usr/bin/env bash
# The vllm tier's install, in the active environment (docs/vllm/tier.md):
#   pip install -c constraints/ci.txt '.[lmcache,test]' && scripts/install_vllm.sh
# vllm goes in WITHOUT its dependencies: they pull about 3.5 GB of CUDA packages, and
# PyPI's torchvision breaks ModelConfig on a CPU torch. What the scheduler, the KV
# connector factory and ModelConfig import beyond lmcache's own dependencies is listed
# here, each pinned to the version the tier was tested with.
set -euo pipefail
pip install -q --no-deps \
    vllm==0.32.0 \
    cbor2==6.3.0 \
    openai==3.63.0 \
    openai-harmony==0.0.8 \
    sniffio==1.3.1 \
    pybase64==1.5.1 \
    cloudpickle==3.1.3 \
    uvloop==0.23.0 \
    xgrammar==0.2.9 \
    apache-tvm-ffi==0.1.15.post2 \
    partial-json-parser==0.2.1.1.post7 \
    llguidance==1.9.1 \
    einops==0.8.2 \
    pillow==13.0.0
python -c "import vllm.v1.core.sched.scheduler, vllm.distributed.kv_transfer.kv_connector.factory" \
    || { echo "install_vllm: vllm 0.32.0 does not import here (see the error above)" >&2; exit 1; }
echo "install_vllm: vllm 0.32.0 imports"
