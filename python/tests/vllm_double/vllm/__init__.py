"""A test double of the part of vLLM that kvoffload.vllm uses, at the pinned version (vLLM
0.20.2): vllm.v1.kv_offload.{abstract, mediums, spec, factory, worker.worker}, the config
objects it reads, and vllm.distributed.parallel_state's rank getters. Signatures and semantics
follow the upstream classes; bodies are reduced to what the interface promises. Only the tests
put this directory on sys.path (CI has no vLLM). numpy arrays of block ids are plain lists here.
"""

__version__ = "0.20.2+kvoffload-test-double"
