"""vllm.distributed.parallel_state's rank getters; the tests set RANKS = (tp, tp_rank, pp_rank).
Unset, they fail as vLLM's do before the groups exist (AssertionError)."""
import types

RANKS = None


def _ranks():
    assert RANKS is not None, "tensor model parallel group is not initialized"
    return RANKS


def get_tensor_model_parallel_world_size():
    return _ranks()[0]


def get_tensor_model_parallel_rank():
    return _ranks()[1]


def get_pp_group():
    return types.SimpleNamespace(rank_in_group=_ranks()[2])
