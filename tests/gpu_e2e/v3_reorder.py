"""Issue 17 item 2's opt-in worker-side reorder, prototyped in the benchmark (no library change).

The worker does not register its per-layer KV caches with the daemon. It registers a staging
buffer of its own, [2 x chunk blocks, layers, K/V, page] on the GPU, as a cross-layer engine (a
block = all of its layers' pages, back to back: the region's own row layout), and moves a job in
chunks of `chunk` blocks (64 MiB by default) through `slots` staging buffers in turn (2 by
default), one job per buffer in flight:

  store  on the worker's own stream: index_select of the chunk's blocks from every layer into a
         half of the staging (the model's process: kernels there take no time slice), an event,
         then a store job of consecutive staging blocks into the chunk's rows (the daemon waits
         on the event and moves every row by one DMA, rows back to back merged); a half is
         refilled once the daemon's verdict for it came
  load   a load job of the chunk's rows into a half, then, after its verdict, index_copy_ from
         the half into every layer on the worker's stream and an event the next load into that
         half waits on

Rows are a random permutation (as an index hands them out), so each row is its own segment of
a block's bytes (16 pages: 64 KiB at 4 KiB pages, 512 KiB at 32 KiB).
"""

import os

import torch


class Reorder:
    """slots: staging buffers of chunk_bytes each, one job each in flight. follow_model: order the
    store after the caller's stream and the caller's stream after the load (what an engine
    needs; a copier looping beside the model leaves it off, or it would queue behind the
    model's work)."""
    count = 0

    def __init__(self, sock, lay, chunk_bytes=64 << 20, slots=2, follow_model=True, seed=5):
        import kvoffload as kvo
        Reorder.count += 1
        self.lay, self.slots, self.follow = lay, slots, follow_model
        t0 = lay.tensors[0]
        self.L, self.K, self.E = len(lay.tensors), t0.shape[0], t0.shape[2]
        self.chunk = max(1, min(lay.n, chunk_bytes // lay.bpb))
        self.staging = torch.empty(slots * self.chunk, self.L, self.K, self.E, dtype=t0.dtype,
                                   device=t0.device)
        spec = kvo.EngineSpec(engine_id="reorder-%d-%d" % (os.getpid(), Reorder.count),
                              num_layers=self.L, page_bytes=lay.bpb // self.L,
                              budget_bytes=lay.n * lay.bpb, rows_assigned_by_engine=True)
        self.worker = kvo.Worker.connect_cuda(
            sock, spec, 0, [(self.staging.data_ptr(), slots * self.chunk, lay.bpb, lay.bpb)],
            num_events=slots)
        g = torch.Generator()
        g.manual_seed(seed)
        self.rows = torch.randperm(lay.n, generator=g).tolist()
        self.blocks = lay.block_sets[0]
        self.stream = torch.cuda.Stream()
        self.job = 0

    def _chunks(self):
        for i, b0 in enumerate(range(0, self.lay.n, self.chunk)):
            yield i % self.slots, b0, min(self.lay.n, b0 + self.chunk)

    def _staging_blocks(self, slot, m):
        return list(range(slot * self.chunk, slot * self.chunk + m))

    def _wait(self, job):
        self.worker.wait(job, timeout_s=120).check()

    def store(self):
        pending = [None] * self.slots
        if self.follow:
            self.stream.wait_stream(torch.cuda.current_stream())
        for slot, b0, b1 in self._chunks():
            if pending[slot] is not None:
                self._wait(pending[slot])  # the daemon has read this slot
            m, s0 = b1 - b0, slot * self.chunk
            idx = self.blocks[b0:b1]
            with torch.cuda.stream(self.stream):
                for l, t in enumerate(self.lay.tensors):
                    self.staging[s0:s0 + m, l].copy_(t.index_select(1, idx).transpose(0, 1))
            self.worker.record_event(slot, self.stream)
            self.job += 1
            self.worker.submit_store(self.job, self._staging_blocks(slot, m), self.rows[b0:b1],
                                     event_index=slot)
            pending[slot] = self.job
        for job in pending:
            if job is not None:
                self._wait(job)

    def load(self):
        chunks = list(self._chunks())
        jobs = {}

        def finish(i):
            slot, b0, b1 = chunks[i]
            self._wait(jobs.pop(i))
            m, s0 = b1 - b0, slot * self.chunk
            idx = self.blocks[b0:b1]
            with torch.cuda.stream(self.stream):
                for l, t in enumerate(self.lay.tensors):
                    t.index_copy_(1, idx, self.staging[s0:s0 + m, l].transpose(0, 1))
            self.worker.record_event(slot, self.stream)  # the next load into it waits on it

        for i, (slot, b0, b1) in enumerate(chunks):
            if len(jobs) == self.slots:
                finish(i - self.slots)
            self.job += 1
            self.worker.submit_load(self.job, self._staging_blocks(slot, b1 - b0),
                                    self.rows[b0:b1],
                                    event_index=slot if i >= self.slots else -1)
            jobs[i] = self.job
        for i in sorted(jobs):
            finish(i)
        self.stream.synchronize()
        if self.follow:
            torch.cuda.current_stream().wait_stream(self.stream)

    def check(self):
        """A store, the blocks poisoned, a load: every byte back (True) or not."""
        self.store()
        keep = [t.index_select(1, self.blocks).clone() for t in self.lay.tensors]
        for t in self.lay.tensors:
            t.index_fill_(1, self.blocks, float("nan"))
        self.load()
        return all(torch.equal(t.index_select(1, self.blocks).view(torch.int16), k.view(torch.int16))
                   for t, k in zip(self.lay.tensors, keep))

    def close(self):
        self.worker.close()
