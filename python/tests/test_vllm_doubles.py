"""The vLLM test doubles (vllm_double/<generation>/vllm) against what vLLM really has, and the
plugin against what vLLM really calls.

* USED lists what each generation's OffloadingConnector calls on the manager, the worker side
  and the spec (names read off the real connector code). Every name must exist in the double
  and be implemented by the plugin's class (checked without vLLM, in CI).
* With vLLM's real source at hand ($KVOFFLOAD_VLLM_SRC, else /work/vllm-src; one folder per
  generation, e.g. v0_20_2/vllm/v1/kv_offload/..., see python/tests/vllm_real), each class and
  function of the double's vllm.v1.kv_offload modules is compared with the real file's
  (parsed, never imported): the same methods with the same parameters, the same dataclass
  fields in the same order with the same defaults-or-not, the same enum members; and USED is
  compared with the names the real connector code calls. Skipped without the real source.
"""

import ast
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DOUBLES = os.path.join(HERE, "vllm_double")
CONNECTOR = "vllm/distributed/kv_transfer/kv_connector/v1"

# What the real OffloadingConnector (scheduler.py / worker.py) calls: self.manager.X,
# self.worker.X (0.20: OffloadingWorker -> handler methods), spec.X of the plugin's spec.
USED = {
    "v0_20_2": {
        "manager": ["complete_load", "complete_store", "lookup", "prepare_load",
                    "prepare_store", "shutdown", "take_events", "touch"],
        "worker": ["get_finished", "shutdown", "transfer_async", "wait"],  # handler methods
        "spec": ["block_size_factor", "get_handlers", "get_manager", "gpu_block_size",
                 "hash_block_size", "kv_cache_config", "vllm_config"],
        "base_files": {"manager": ("vllm/v1/kv_offload/abstract.py", "OffloadingManager"),
                       "worker": ("vllm/v1/kv_offload/worker/worker.py", "OffloadingHandler"),
                       "spec": ("vllm/v1/kv_offload/spec.py", "OffloadingSpec")},
    },
    "main_2026_08": {
        "manager": ["complete_load", "complete_store", "get_stats", "has_pending_work",
                    "lookup", "on_new_request", "on_request_finished", "on_schedule_end",
                    "prepare_load", "prepare_store", "reset_cache", "shutdown", "take_events",
                    "touch"],
        "worker": ["get_finished", "shutdown", "submit_load", "submit_store", "wait"],
        "spec": ["blocks_per_chunk", "config", "get_manager", "get_worker", "kv_events_config",
                 "offload_prompt_only", "replicated_layout", "tokens_per_block",
                 "tokens_per_hash"],
        "base_files": {"manager": ("vllm/v1/kv_offload/base.py", "OffloadingManager"),
                       "worker": ("vllm/v1/kv_offload/base.py", "OffloadingWorker"),
                       "spec": ("vllm/v1/kv_offload/base.py", "OffloadingSpec")},
    },
}

# The plugin's class for each role: (file, class). The adapter layer defines some methods under
# a capability row's `if` in the class body (both branches are read here).
PLUGIN = {
    "v0_20_2": {"manager": ("adapter.py", "KvoffloadManager"),
                "worker": ("transfer_handlers.py", "KvoffloadTransferHandler"),
                "spec": ("adapter.py", "KvoffloadSpec")},
    "main_2026_08": {"manager": ("adapter.py", "KvoffloadManager"),
                     "worker": ("transfer_worker.py", "KvoffloadWorker"),
                     "spec": ("adapter.py", "KvoffloadSpec")},
}
PLUGIN_DIR = os.path.join(os.path.dirname(HERE), "kvoffload", "vllm")


def _tree(path):
    with open(path) as f:
        return ast.parse(f.read(), path)


def _classes(tree):
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _functions(body):
    out = {}
    for n in body:
        if isinstance(n, ast.If):  # a capability row's choice in the plugin's class body
            out.update(_functions(n.body))
            out.update(_functions(n.orelse))
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[n.name] = n
    return out


def _params(fn):
    a = fn.args
    positional = [p.arg for p in a.posonlyargs + a.args]
    defaults = positional[len(positional) - len(a.defaults):] if a.defaults else []
    kwonly = [p.arg for p in a.kwonlyargs]
    return (positional, sorted(defaults), kwonly, a.vararg is not None, a.kwarg is not None)


def _fields(cls):
    """Annotated class attributes in order, with whether each has a default."""
    return [(n.target.id, n.value is not None) for n in cls.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


def _assigned(cls):
    return [t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Name)]


def _bases(cls):
    return [ast.unparse(b) for b in cls.bases]


def _self_attributes(cls):
    """Attributes a class defines: methods, class-level names and self.X assignments."""
    names = set(_functions(cls.body)) | {f for f, _ in _fields(cls)} | set(_assigned(cls))
    for node in ast.walk(cls):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and \
                        t.value.id == "self":
                    names.add(t.attr)
    return names


def _real_root():
    root = os.environ.get("KVOFFLOAD_VLLM_SRC") or "/work/vllm-src"
    return root if os.path.isdir(root) else None


class UsedNamesTest(unittest.TestCase):
    """Every manager/worker/spec name the real connector uses exists in the double's base
    class and is implemented by the plugin's class (not just inherited)."""

    def check(self, generation):
        used = USED[generation]
        for role in ("manager", "worker", "spec"):
            plugin_file, plugin_class = PLUGIN[generation][role]
            plugin = _classes(_tree(os.path.join(PLUGIN_DIR, plugin_file)))
            path, cls = used["base_files"][role]
            base = _classes(_tree(os.path.join(DOUBLES, generation, path)))[cls]
            have = _self_attributes(base)
            ours = plugin[plugin_class]
            ours_have = _self_attributes(ours)
            for name in used[role]:
                self.assertIn(name, have, "%s double: %s.%s is missing" % (generation, cls, name))
                if name in _functions(base.body):
                    self.assertIn(name, ours_have, "%s: %s does not implement %s" %
                                  (generation, plugin_class, name))
                    theirs_p = _params(_functions(base.body)[name])[0]
                    variants = [_params(f)[0] for f in ast.walk(ours) if isinstance(
                        f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == name]
                    self.assertIn(theirs_p, [v[:len(theirs_p)] for v in variants],
                                  "%s: %s.%s parameters" % (generation, plugin_class, name))

    def test_v0_20_2(self):
        self.check("v0_20_2")

    def test_main_2026_08(self):
        self.check("main_2026_08")


class DoubleMatchesRealSourceTest(unittest.TestCase):
    """The doubles' vllm.v1.kv_offload classes against vLLM's real files (when at hand)."""

    def compare_file(self, generation, rel):
        root = _real_root()
        real_path = os.path.join(root, generation, rel)
        if not os.path.exists(real_path):
            self.skipTest("no %s" % real_path)
        double = _tree(os.path.join(DOUBLES, generation, rel))
        real = _tree(real_path)
        real_classes, real_funcs = _classes(real), _functions(real.body)
        for name, fn in _functions(double.body).items():
            self.assertIn(name, real_funcs, "%s %s: no function %s upstream" % (generation, rel,
                                                                                name))
            self.assertEqual(_params(fn), _params(real_funcs[name]),
                             "%s %s: %s()" % (generation, rel, name))
        for name, cls in _classes(double).items():
            self.assertIn(name, real_classes, "%s %s: no class %s upstream" % (generation, rel,
                                                                              name))
            theirs = real_classes[name]
            where = "%s %s: %s" % (generation, rel, name)
            self.assertEqual(_bases(cls), _bases(theirs), where + " bases")
            self.assertEqual(_fields(cls), _fields(theirs), where + " fields")
            self.assertEqual(_assigned(cls), _assigned(theirs), where + " members")
            ours_f, theirs_f = _functions(cls.body), _functions(theirs.body)
            self.assertEqual(sorted(ours_f), sorted(theirs_f), where + " methods")
            for m in ours_f:
                self.assertEqual(_params(ours_f[m]), _params(theirs_f[m]),
                                 "%s.%s()" % (where, m))
        return real

    def modules(self, generation):
        base = os.path.join(DOUBLES, generation)
        out = []
        for dirpath, _, files in os.walk(os.path.join(base, "vllm", "v1", "kv_offload")):
            for f in files:
                if f.endswith(".py") and f != "__init__.py":
                    out.append(os.path.relpath(os.path.join(dirpath, f), base))
        return sorted(out)

    def check(self, generation):
        if _real_root() is None:
            self.skipTest("vLLM's real source is not here ($KVOFFLOAD_VLLM_SRC)")
        if not os.path.isdir(os.path.join(_real_root(), generation)):
            self.skipTest("no %s/%s" % (_real_root(), generation))
        for rel in self.modules(generation):
            with self.subTest(rel=rel):
                self.compare_file(generation, rel)
        # The load-error path: the real OffloadingConnector inherits the base's hook.
        path = os.path.join(_real_root(), generation, CONNECTOR, "offloading_connector.py")
        if os.path.exists(path):
            cls = _classes(_tree(path))["OffloadingConnector"]
            self.assertNotIn("get_block_ids_with_load_errors", _functions(cls.body))
        # USED is what the real connector calls.
        used = USED[generation]
        for role, attr in (("manager", "self.manager."), ("worker", "self.worker.")):
            names = set()
            for f in ("scheduler.py", "worker.py"):
                p = os.path.join(_real_root(), generation, CONNECTOR, "offloading", f)
                if not os.path.exists(p):
                    self.skipTest("no %s" % p)
                with open(p) as fh:
                    text = fh.read()
                i = text.find(attr)
                while i >= 0:
                    j = i + len(attr)
                    k = j
                    while k < len(text) and (text[k].isalnum() or text[k] == "_"):
                        k += 1
                    names.add(text[j:k])
                    i = text.find(attr, k)
            if generation == "v0_20_2" and role == "worker":
                names = {"get_finished", "shutdown", "transfer_async", "wait"} if \
                    "transfer_async" in names else names  # routed to handlers of these names
            self.assertEqual(sorted(names - {"register_handler"}), used[role],
                             "%s: %s calls" % (generation, role))

    def test_v0_20_2(self):
        self.check("v0_20_2")

    def test_main_2026_08(self):
        self.check("main_2026_08")


if __name__ == "__main__":
    unittest.main()
