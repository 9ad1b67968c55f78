#!/usr/bin/env python3
"""Writes the hand-made seeds of tests/fuzz/corpus/service: scripts that reach deep states (a
store and load round trip, the replicated layout, a held copy and a drop, a worker dying while its
copy is held, expiry). It encodes choices exactly as tests/fuzz/fuzz_input.h decodes them and in
the order service_fuzzer.cc asks for them; keep the three in step.

    python3 tests/fuzz/make_seeds.py tests/fuzz/corpus/service
"""
import os
import sys

U32 = 2**32 - 1
U64 = 2**64 - 1
CAP = 4 << 20


class Enc:
    def __init__(self):
        self.out = bytearray()

    def int(self, lo, hi, value):
        assert lo <= value <= hi, (lo, hi, value)
        rng = hi - lo
        n = (rng.bit_length() + 7) // 8
        self.out += (value - lo).to_bytes(n, "big") if n else b""

    def bool(self, b):
        self.int(0, 1, 1 if b else 0)


def engine_id(e, i=0):
    e.int(0, 7, 2)  # "e<i>"
    e.int(0, 1, i)


def spec(e, world=2, mla=False, budget=128 << 10, eid=0):
    engine_id(e, eid)
    e.int(0, 1, 0)           # dp_rank
    e.int(0, 7, 1)           # world from the small range
    e.int(1, 2, world)
    e.int(0, 3, 1)           # local_world_size undeclared
    e.bool(True)             # tp = world
    for _ in range(3):
        e.int(0, 7, 1)       # pp, pcp, dcp = 1
    e.int(0, 7, 1)           # executor MP
    if mla:
        e.int(0, 3, 0)
        e.int(0, 3, 2)       # attention MLA
    else:
        e.int(0, 3, 1)       # attention MHA
    e.int(0, 7, 1)           # num_kv_groups 1
    e.int(0, 7, 1)           # num_layers 2
    e.int(0, 7, 1)           # page_bytes 4096
    e.int(0, 7, 1)           # worker_bytes_per_block 0
    e.int(0, 3, 1)           # blocks_per_row 1
    e.int(0, 15, 3)          # budget from the small range (service_fuzzer.cc FillSpec)
    e.int(0, 256 << 10, budget)
    e.int(0, 15, 1)          # no secondary tiers
    e.int(0, 3, 1)           # rows assigned by the daemon


def step(e, n):
    e.int(0, 9, n)


def open_engine(e, **kw):
    step(e, 0)
    spec(e, **kw)


def register(e, rank, memory=0, **kw):
    step(e, 1)
    e.int(0, 7, 1)           # a registration
    spec(e, **kw)
    e.int(0, 7, 1)           # mp_rank from the small range
    e.int(0, 2, rank)
    e.int(0, 3, 0)           # device
    e.int(0, 1, memory)
    e.int(0, 3, 1)           # tensors as registered
    e.int(0, 3, 1)           # no events
    e.int(0, 1000, 123)      # pid


def keys(e, names, eid=0):
    engine_id(e, eid)
    e.int(0, 1, 0)
    e.int(0, 6, len(names))
    for k in names:
        e.int(0, 15, 3)
        e.int(0, 7, k)


def index_call(e, which, names, success=True):
    step(e, 5)
    e.int(0, 5, which)
    keys(e, names)
    if which == 2:
        e.bool(success)


def submit(e, session, nsessions, job, direction, row_picks, blocks):
    """row_picks: indexes into the rows remembered so far."""
    step(e, 2)
    e.int(0, nsessions - 1, session)
    e.int(0, 15, 1)          # a submit
    e.int(0, 7, 1)
    e.int(0, 5, job)
    e.int(0, 3, direction)   # 1 store, 2 load
    e.int(0, 4, len(row_picks))
    for pick, remembered in row_picks:
        e.int(0, 3, 1)       # a remembered row
        e.int(0, remembered - 1, pick)
    e.int(0, 7, 1)           # one block per row
    e.int(1, 2, 1)
    for b in blocks:
        e.int(0, 7, 1)
        e.int(0, 7, b)
    e.int(0, 3, 1)           # event_index -1


def admin_stats(e):
    step(e, 7)
    e.int(0, 3, 0)


def drop(e, force=True):
    step(e, 7)
    e.int(0, 3, 2)
    engine_id(e, 0)
    e.int(0, 1, 0)
    e.bool(force)


def hold(e, slot=None):
    step(e, 8)
    e.int(0, 4, 4)           # kHold
    e.int(0, 2000, 0)
    e.bool(slot is not None)
    if slot is not None:
        e.int(0, 1, slot)


def release(e):
    step(e, 9)
    e.bool(True)


def maintain(e, seconds):
    step(e, 9)
    e.bool(False)
    e.int(0, 60, seconds)


def hang_up(e, session, nsessions, kill):
    step(e, 4)
    e.int(0, nsessions - 1, session)
    e.bool(kill)


def roundtrip():
    e = Enc()
    open_engine(e)
    register(e, 0)
    register(e, 1)
    index_call(e, 1, [0, 1])                     # PrepareStore k0 k1 → 2 rows remembered
    submit(e, 0, 2, 1, 1, [(0, 2), (1, 2)], [2, 3])
    submit(e, 1, 2, 1, 1, [(0, 2), (1, 2)], [4, 5])
    index_call(e, 2, [0, 1], success=True)      # CompleteStore
    index_call(e, 0, [0, 1, 2])                 # Lookup
    index_call(e, 3, [0, 1])                    # PrepareLoad → 2 more rows remembered
    submit(e, 0, 2, 2, 2, [(2, 4), (3, 4)], [6, 7])
    submit(e, 1, 2, 2, 2, [(2, 4), (3, 4)], [6, 7])
    index_call(e, 4, [0, 1])                    # CompleteLoad
    admin_stats(e)
    return e.out


def replicated():
    e = Enc()
    register(e, 1, mla=True)
    register(e, 0, mla=True)
    index_call(e, 1, [3])
    submit(e, 0, 2, 4, 1, [(0, 1)], [1])         # non-writer votes first
    hold(e)
    submit(e, 1, 2, 4, 1, [(0, 1)], [1])         # the writer's copy is held
    index_call(e, 0, [3])
    release(e)
    index_call(e, 2, [3], success=True)
    admin_stats(e)
    return e.out


def layout_mismatch():
    e = Enc()
    register(e, 0)
    register(e, 1, memory=1)                     # one 8 KiB page instead of two of 4 KiB
    index_call(e, 0, [0])
    return e.out


def held_then_dropped():
    e = Enc()
    register(e, 0, world=1)
    index_call(e, 1, [0, 1, 2])
    hold(e)
    hold(e)
    submit(e, 0, 1, 1, 1, [(0, 3)], [0])
    submit(e, 0, 1, 2, 1, [(1, 3), (2, 3)], [1, 2])
    drop(e, force=False)
    drop(e, force=True)
    admin_stats(e)
    release(e)
    return e.out


def worker_dies_while_copying():
    e = Enc()
    register(e, 0)
    register(e, 1)
    index_call(e, 1, [5])
    hold(e, slot=0)
    submit(e, 0, 2, 3, 1, [(0, 1)], [0])
    submit(e, 1, 2, 3, 1, [(0, 1)], [0])
    hang_up(e, 0, 2, kill=True)
    admin_stats(e)
    release(e)
    index_call(e, 2, [5], success=False)
    return e.out


def expiry():
    e = Enc()
    register(e, 0)
    register(e, 1)
    index_call(e, 1, [6])
    submit(e, 0, 2, 5, 1, [(0, 1)], [3])
    maintain(e, 45)
    submit(e, 1, 2, 5, 1, [(0, 1)], [3])         # late part: the job's verdict
    hang_up(e, 1, 2, kill=False)
    return e.out


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, make in [("roundtrip", roundtrip), ("replicated", replicated),
                       ("held_then_dropped", held_then_dropped), ("layout_mismatch", layout_mismatch),
                       ("worker_dies_while_copying", worker_dies_while_copying),
                       ("expiry", expiry)]:
        with open(os.path.join(out, "seed_" + name), "wb") as f:
            f.write(make())


if __name__ == "__main__":
    main()
