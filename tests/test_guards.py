"""Each static guard on its own: what it must catch, and honest code it must let through."""
from __future__ import annotations

import textwrap

import pytest

from kdsl.search.eval import guards


def found(source: str, backend: str = "triton", language: str = "python") -> list[str]:
    return [str(v) for v in guards.check(textwrap.dedent(source), language, backend)]


def guard_hits(name: str, source: str, language: str = "python") -> list[str]:
    src = guards.Source(textwrap.dedent(source), language)
    return [msg for _, msg in guards.GUARDS[name].check(src)]


HONEST_NUMPY = """
    import numpy as np
    import torch

    def kernel(inputs, outputs, sizes):
        x = inputs["x"].float().numpy()
        e = np.exp(x - x.max(axis=1, keepdims=True))
        y = e / e.sum(axis=1, keepdims=True)
        rows = sizes["M"] * 2
        outputs["y"].copy_(torch.from_numpy(y))
"""

HONEST_TRITON = """
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _softmax(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + offs, mask=offs < N, other=-float("inf"))
        e = tl.exp(x - tl.max(x, 0))
        tl.store(y_ptr + row * N + offs, e / tl.sum(e, 0), mask=offs < N)

    def _launch(x, y, M, N):
        _softmax[(M,)](x, y, N, BLOCK=triton.next_power_of_2(N))

    def kernel(inputs, outputs, sizes):
        t = {name: inputs[name].contiguous() for name in ("x",)}
        y = outputs["y"]
        M, N = t["x"].shape
        if t["x"].dtype == torch.bfloat16 and y.numel() * y.element_size() > 0:
            pass
        props = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else None
        sms = getattr(props, "multi_processor_count", 1)
        _launch(t["x"], y, M, N)
"""

HONEST_C = r"""
    #include <math.h>
    #include <stdint.h>
    #define KD_INLINE static inline __attribute__((always_inline))
    static const float LOG2E = 1.4426950408889634f;
    typedef struct { int64_t m, n; } dims_t;
    struct pair { float a, b; };
    KD_INLINE float kd_exp(float x) { return expf(x); }
    void helper(const float *x, long n);
    void kernel(const float *x, float *y, int64_t m, int64_t n) {
      /* static int cache; in a comment is fine, and so is "PyRun_SimpleString(" in a string */
      const char *why = "PyRun_SimpleString(";
      #pragma omp parallel for
      for (int64_t i = 0; i < m; i++) y[i] = kd_exp(x[i]) * LOG2E;
    }
"""


@pytest.mark.parametrize("source", [HONEST_NUMPY, HONEST_TRITON])
def test_honest_python_passes_every_guard(source):
    assert found(source) == []


def test_honest_c_passes_every_guard():
    assert found(HONEST_C, backend="c", language="c") == []


def test_registry_names_each_guard_with_a_doc():
    assert set(guards.GUARDS) == {"no_torch_compute", "no_side_streams", "no_threads",
                                  "no_state", "no_oracle", "no_dynamic_code"}
    assert all(g.doc for g in guards.GUARDS.values())


def test_unparsable_python_is_a_violation():
    assert found("def kernel(:\n")[0].startswith("parse: line 1")


# ---- no_torch_compute ----

@pytest.mark.parametrize("body, what", [
    ("import torch\ndef kernel(inputs, outputs, sizes):\n"
     "    outputs['y'].copy_(torch.softmax(inputs['x'], -1))\n", "torch.softmax"),
    ("import torch.nn.functional as F\ndef kernel(inputs, outputs, sizes):\n"
     "    outputs['y'].copy_(F.softmax(inputs['x'], -1))\n", "torch.nn.functional.softmax"),
    ("from torch.nn import functional as F\ndef kernel(inputs, outputs, sizes):\n"
     "    outputs['y'].copy_(F.silu(inputs['a']))\n", "torch.nn.functional.silu"),
    ("import torch\ndef kernel(inputs, outputs, sizes):\n"
     "    torch.ops.aten._softmax.out(inputs['x'], -1, False, out=outputs['y'])\n",
     "torch.ops.aten._softmax.out"),
    ("import torch\ndef kernel(inputs, outputs, sizes):\n"
     "    outputs['c'].copy_(torch.matmul(inputs['a'], inputs['b']))\n", "torch.matmul"),
    ("import torch\nlayer = torch.nn.Softmax(dim=-1)\n", "torch.nn.Softmax"),
    ("import torch as T\nsm = T.softmax\n", "torch.softmax"),
    ("from torch import softmax\n", "imports torch.softmax"),
    ("from torch import *\n", "star import from torch"),
    ("from kdsl import torch_ops as kt\n", "kdsl.torch_ops"),
])
def test_torch_calls_are_caught(body, what):
    hits = guard_hits("no_torch_compute", body)
    assert any(what in h for h in hits), hits


@pytest.mark.parametrize("body, what", [
    ("e = inputs['x'].exp()\noutputs['y'].copy_(e)", ".exp()"),
    ("x = inputs['x']\noutputs['y'][:] = x.softmax(-1)", ".softmax()"),
    ("a, b = inputs['a'], inputs['b']\noutputs['c'].copy_(a @ b)", "@ (matmul)"),
    ("outputs['y'][:] = inputs['a'] * 2", "Mult"),
    ("y = outputs['y']\ny += inputs['x']", "in-place"),
    ("outputs['y'][:] = -inputs['x']", "tensor arithmetic"),
    ("outputs['y'].copy_(inputs['x'] > 0)", "comparison"),
    ("f = getattr(inputs['x'], 'soft' + 'max')", "getattr on a tensor"),
    ("for name, t in inputs.items():\n    outputs['y'].copy_(t.sum(-1, keepdim=True))", ".sum()"),
    ("helper(inputs['x'], outputs['y'])", ".exp()"),
])
def test_tensor_compute_in_the_wrapper_is_caught(body, what):
    source = ("def helper(x, y):\n    y.copy_(x.exp())\n\n"
              "def kernel(inputs, outputs, sizes):\n" + textwrap.indent(body, "    ") + "\n")
    hits = guard_hits("no_torch_compute", source)
    assert any(what in h for h in hits), hits


def test_plumbing_on_tensors_is_allowed():
    source = """
        import torch
        def kernel(inputs, outputs, sizes):
            x = inputs["x"].contiguous().view(-1, sizes["N"]).to(torch.float32)
            tmp = torch.empty_like(x)
            n = x.numel() * x.element_size() + x.stride(0)
            if x.dtype == torch.float32 and x is not None and n > 0:
                outputs["y"].copy_(tmp)
            outputs["y"].zero_()
    """
    assert guard_hits("no_torch_compute", source) == []


def test_the_torch_backend_is_exempt_from_the_torch_rule_only():
    source = """
        import torch
        _seen = {}
        def kernel(inputs, outputs, sizes):
            _seen[1] = 1
            outputs["y"].copy_(torch.softmax(inputs["x"], dim=-1))
    """
    hits = found(source, backend="torch")
    assert hits and all(h.startswith("no_state") for h in hits)
    assert any(h.startswith("no_torch_compute") for h in found(source, backend="numpy"))


@pytest.mark.parametrize("code, what", [
    ("#include <Python.h>\n", "Python.h"),
    ("void k(void) { PyRun_SimpleString(\"import torch\"); }\n", "PyRun_SimpleString"),
    ("#include <torch/extension.h>\n", "torch/extension.h"),
    ("void k(void) { at::softmax(x, 1); }\n", "at::softmax"),
])
def test_c_may_not_call_back_into_python_or_torch(code, what):
    hits = guard_hits("no_torch_compute", code, "c")
    assert any(what in h for h in hits), hits


# ---- no_side_streams ----

@pytest.mark.parametrize("body, what", [
    ("s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    outputs['y'].zero_()",
     "torch.cuda.Stream"),
    ("with torch.cuda.stream(torch.cuda.Stream()):\n    pass", "torch.cuda.stream"),
    ("torch.cuda.set_stream(s)", "torch.cuda.set_stream"),
    ("g = torch.cuda.CUDAGraph()", "torch.cuda.CUDAGraph"),
    ("k[(1,)](inputs['x'], stream=7)", "stream= argument"),
])
def test_side_streams_are_caught(body, what):
    source = "import torch\ndef kernel(inputs, outputs, sizes):\n" + \
        textwrap.indent(body, "    ") + "\n"
    hits = guard_hits("no_side_streams", source)
    assert any(what in h for h in hits), hits


def test_the_current_stream_is_fine():
    source = """
        import torch
        def kernel(inputs, outputs, sizes):
            s = torch.cuda.current_stream()
            launch(stream=torch.cuda.current_stream())
            launch(stream=None)
    """
    assert guard_hits("no_side_streams", source) == []


def test_c_side_streams_are_caught():
    code = "void k(void) { cudaStream_t s; cudaStreamCreateWithFlags(&s, 1); }\n"
    assert guard_hits("no_side_streams", code, "c")


# ---- no_threads ----

@pytest.mark.parametrize("source", [
    "import threading\n",
    "from concurrent.futures import ThreadPoolExecutor\n",
    "import os\ndef kernel(inputs, outputs, sizes):\n    os.fork()\n",
    "import subprocess\n",
])
def test_threads_and_processes_are_caught(source):
    assert guard_hits("no_threads", source)


def test_c_threads_are_caught_but_openmp_is_fine():
    assert guard_hits("no_threads", "void k(void) { pthread_create(&t, 0, f, 0); }\n", "c")
    assert guard_hits("no_threads", "#pragma omp parallel for\nvoid k(void) {}\n", "c") == []


# ---- no_state ----

@pytest.mark.parametrize("source, what", [
    ("_memo = {}\ndef kernel(inputs, outputs, sizes):\n    _memo[sizes['M']] = 1\n",
     "module-level '_memo'"),
    ("_memo = []\ndef kernel(inputs, outputs, sizes):\n    _memo.append(outputs['y'])\n",
     ".append()"),
    ("calls = 0\ndef kernel(inputs, outputs, sizes):\n    global calls\n    calls += 1\n",
     "global calls"),
    ("def kernel(inputs, outputs, sizes, _c={}):\n    pass\n", "mutable default"),
    ("import functools\n@functools.lru_cache(None)\ndef kernel(inputs, outputs, sizes):\n"
     "    pass\n", "functools.lru_cache"),
    ("from functools import cache\n@cache\ndef f(M):\n    return M\n", "functools.cache"),
    ("def kernel(inputs, outputs, sizes):\n    kernel.last = outputs['y']\n",
     "module-level 'kernel'"),
    ("def kernel(inputs, outputs, sizes):\n    setattr(kernel, 'n', 1)\n", "setattr"),
    ("import numpy as np\n_buf = np.empty(10)\ndef kernel(inputs, outputs, sizes):\n"
     "    np.exp(inputs['x'].numpy(), out=_buf)\n", "through out="),
    ("def make():\n    n = 0\n    def kernel(inputs, outputs, sizes):\n        nonlocal n\n"
     "        n += 1\n    return kernel\n", "nonlocal n"),
])
def test_state_between_calls_is_caught(source, what):
    hits = guard_hits("no_state", source)
    assert any(what in h for h in hits), hits


def test_module_constants_and_locals_are_not_state():
    source = """
        CONFIGS = [1, 2, 4]
        TABLE = {"a": 1}
        def kernel(inputs, outputs, sizes):
            local = {}
            local["M"] = sizes["M"]
            best = [c for c in CONFIGS if c <= TABLE["a"]]
            best.append(2)
    """
    assert guard_hits("no_state", source) == []


def test_c_mutable_globals_and_statics_are_caught():
    code = ("static float cache[1024];\nint calls = 0;\n"
            "void k(float *y) {\n  static int seen = 0;\n  y[0] = 1;\n}\n")
    hits = guard_hits("no_state", code, "c")
    assert len(hits) == 3 and all("state kept between calls" in h for h in hits), hits


# ---- no_oracle and no_dynamic_code ----

@pytest.mark.parametrize("source", [
    "from kdsl.reference import reference\n",
    "import kdsl.baseline\n",
    "from kdsl import compare\n",
])
def test_the_evaluators_own_answers_are_off_limits(source):
    assert guard_hits("no_oracle", source)


@pytest.mark.parametrize("source", [
    "def kernel(inputs, outputs, sizes):\n    exec('import torch')\n",
    "def kernel(inputs, outputs, sizes):\n    __import__('torch')\n",
    "import importlib\n",
    "import gc\n",
    "import sys\nf = sys._getframe(1)\n",
])
def test_dynamic_code_is_caught(source):
    assert guard_hits("no_dynamic_code", source)


def test_c_dlopen_is_caught():
    assert guard_hits("no_dynamic_code", 'void k(void) { dlopen("libtorch.so", 1); }\n', "c")


# ---- the real backends' own output ----

@pytest.mark.parametrize("backend", ["numpy", "c", "triton", "torch"])
def test_real_backends_render_guard_clean_kernels(backend):
    from kdsl import backends, spec
    try:
        b = backends.get(backend)
    except Exception as e:  # a backend still being written
        pytest.skip(f"backend {backend} unavailable: {e}")
    for name in ("softmax", "swiglu", "matmul", "embedding_bag_sum"):
        op = spec.load(f"specs/{name}.kspec").ops[0]
        if b.supports(op, "cpu"):
            continue
        source = b.render(op, b.space(op, "cpu").default(), "cpu")
        assert guards.check(source, b.language, b.name) == [], (name, backend)
