"""Copy path v3's opt-in worker-side reorder in the benchmark: kvoffload.StagedWorker (the
library's; python/kvoffload/staged.py) driven over a v3_workloads.Layout.

One 512 MiB job each way: the job's GPU blocks (the layout's block set, random or consecutive)
into a random permutation of rows (as an index hands them out), through `slots` staging buffers
of `chunk_bytes` each. store() and load() return once the job's verdict came (a load's blocks
hold their bytes then). With a layout of several block sets, submit(direction, s) and wait(job)
keep jobs of different sets (disjoint blocks and rows) in flight together.
"""

import os

import torch


class Reorder:
    """follow_model: order a store after the caller's stream (what an engine needs); a copier
    looping beside the model leaves it off (its jobs follow an idle stream of their own), or it
    would queue behind the model's graphs."""
    count = 0

    def __init__(self, sock, lay, chunk_bytes=32 << 20, slots=4, follow_model=True, seed=5,
                 cuda_graphs=True):
        import kvoffload as kvo
        Reorder.count += 1
        self.lay = lay
        layers, page = lay.spec_fields()
        spec = kvo.EngineSpec(engine_id="reorder-%d-%d" % (os.getpid(), Reorder.count),
                              num_layers=layers, page_bytes=page,
                              budget_bytes=lay.sets * lay.n * lay.bpb,
                              rows_assigned_by_engine=True)
        self.worker = kvo.StagedWorker.connect_cuda(
            sock, spec, 0, lay.tensors, num_blocks=lay.num_blocks,
            staging_bytes=slots * chunk_bytes, buffers=slots, cuda_graphs=cuda_graphs)
        self.chunk = self.worker.chunk_rows
        g = torch.Generator()
        g.manual_seed(seed)
        rows = torch.randperm(lay.sets * lay.n, generator=g).tolist()
        self.rows = [rows[i * lay.n:(i + 1) * lay.n] for i in range(lay.sets)]
        self.stream = None if follow_model else torch.cuda.Stream()
        self.job = 0

    def submit(self, direction, s=0):
        """Submits set s's job; returns its id for wait()."""
        self.job += 1
        submit = getattr(self.worker, "submit_" + direction)
        submit(self.job, self.lay.block_lists[s], self.rows[s], stream=self.stream)
        return self.job

    def wait(self, job):
        self.worker.wait(job, timeout_s=120).check()

    def _run(self, direction):
        self.wait(self.submit(direction))

    def store(self):
        self._run("store")

    def load(self):
        self._run("load")

    def check(self):
        """A store, the blocks poisoned, a load: every byte back (True) or not."""
        blocks = self.lay.block_sets[0]
        self.store()
        keep = [t.index_select(1, blocks).clone() for t in self.lay.tensors]
        for t in self.lay.tensors:
            t.index_fill_(1, blocks, float("nan"))
        torch.cuda.synchronize()
        self.load()
        return all(torch.equal(t.index_select(1, blocks).view(torch.int16), k.view(torch.int16))
                   for t, k in zip(self.lay.tensors, keep))

    def close(self):
        self.worker.close()
