"""kvoffload's test double of vLLM main of 2026-08-17 (neuralmagic/vllm commit 017e9f4): the
part of vLLM that kvoffload.vllm uses, written for kvoffload's tests (no vLLM code). The classes
of vllm.v1.kv_offload.{base, config, factory} mirror that commit's signatures and dataclass
fields exactly (checked against the real files by python/tests/test_vllm_doubles.py when the
real source is at hand); bodies do what the interface promises. Tensors are typed Any (no torch
here). Only the tests put this directory on sys.path (CI has no vLLM).
"""

__version__ = "0.21.0.dev+g017e9f4.kvoffload-test-double"
