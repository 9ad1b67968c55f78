"""kvoffload's test double of vLLM 0.20.2 (tag v0.20.2, commit bc150f5, 2026-05-07): the part of
vLLM that kvoffload.vllm uses, written for kvoffload's tests (no vLLM code). The classes of
vllm.v1.kv_offload mirror 0.20.2's signatures and dataclass fields exactly (checked against the
real files by python/tests/test_vllm_doubles.py when the real source is at hand); bodies do what
the interface promises. The config objects carry only the fields kvoffload.vllm reads, under
upstream's names. Only the tests put this directory on sys.path (CI has no vLLM).
"""

__version__ = "0.20.2+kvoffload-test-double"
