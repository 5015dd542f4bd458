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


@pytest.mark.parametrize("source, backend", [(HONEST_NUMPY, "numpy"), (HONEST_TRITON, "triton")])
def test_honest_python_passes_every_guard(source, backend):
    assert found(source, backend=backend) == []


def test_honest_c_passes_every_guard():
    assert found(HONEST_C, backend="c", language="c") == []


def test_registry_names_each_guard_with_a_doc():
    assert set(guards.GUARDS) == {"allowed_imports", "allowed_names", "module_level",
                                  "no_torch_compute", "no_side_streams", "no_threads",
                                  "no_state", "no_dynamic_code"}
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

@pytest.mark.parametrize("source, guard", [
    ("import threading\n", "allowed_imports"),
    ("from concurrent.futures import ThreadPoolExecutor\n", "allowed_imports"),
    ("import os\ndef kernel(inputs, outputs, sizes):\n    os.fork()\n", "allowed_names"),
    ("import subprocess\n", "allowed_imports"),
])
def test_threads_and_processes_are_caught(source, guard):
    assert any(h.startswith(guard) for h in found(source)), found(source)


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
    ("def kernel(inputs, outputs, sizes):\n    kernel.last = outputs['y']\n",
     "module-level 'kernel'"),
    ("def kernel(inputs, outputs, sizes):\n    inputs['x'].seen = outputs['y']\n",
     "assigns attribute inputs['x'].seen"),
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
    code = ("static float cache[1024];\nint calls = 1;\n"
            "void k(float *y) {\n  static int seen = 0;\n"
            "  y[0] = cache[0] + seen++ + calls;\n  cache[1] = y[1];\n}\n")
    hits = guard_hits("no_state", code, "c")
    assert len(hits) == 5 and all("state kept between calls" in h for h in hits), hits
    assert any("writable data in .bss" in h and "cache" in h for h in hits), hits
    assert any("writable data in .data" in h and "calls" in h for h in hits), hits


# ---- the evaluator's own modules, dynamic code ----

@pytest.mark.parametrize("source, guard", [
    ("from kdsl.reference import reference\n", "allowed_imports"),
    ("import kdsl.baseline\n", "allowed_imports"),
    ("from kdsl import compare\n", "allowed_imports"),
    ("def kernel(inputs, outputs, sizes):\n    exec('import torch')\n", "allowed_names"),
    ("def kernel(inputs, outputs, sizes):\n    __import__('torch')\n", "allowed_names"),
    ("import importlib\n", "allowed_imports"),
    ("import gc\n", "allowed_imports"),
    ("import sys\nf = sys._getframe(1)\n", "allowed_imports"),
])
def test_the_evaluators_modules_and_dynamic_code_are_off_limits(source, guard):
    assert any(h.startswith(guard) for h in found(source)), found(source)


def test_c_dlopen_is_caught():
    assert guard_hits("no_dynamic_code", 'void k(void) { dlopen("libtorch.so", 1); }\n', "c")


# ---- allow-lists: the attacks that beat the deny-lists -----------------------
# Each is rejected by its named guard with a clear message; a correct kernel beside it passes.

PY_ATTACKS = {
    "__builtins__ reaches __import__": ("""
        __builtins__["__import__"]("kdsl.search.eval.correctness").judge = None
        def kernel(inputs, outputs, sizes):
            pass
    """, "allowed_names", "line 2: dunder name __builtins__"),
    "os.sys.modules patches the evaluator": ("""
        import os
        def kernel(inputs, outputs, sizes):
            os.sys.modules["kdsl.search.eval.timing"].SUSPECT_FRACTION = 0
    """, "allowed_names", "line 4: uses os.sys.modules, which is not on the triton allow-list"),
    "os.sys._getframe reads the caller": ("""
        import os
        def kernel(inputs, outputs, sizes):
            ref = os.sys._getframe(2).f_locals["ref"]
    """, "allowed_names", "line 4: private attribute ._getframe"),
    "a traceback's frame reads the caller": ("""
        def kernel(inputs, outputs, sizes):
            try:
                1 / 0
            except ZeroDivisionError as e:
                ref = e.__traceback__.tb_frame.f_back.f_locals["ref"]
    """, "allowed_names", "line 6: dunder attribute .__traceback__"),
    "tb_frame without a dunder": ("""
        def kernel(inputs, outputs, sizes, tb=None):
            frame = tb.tb_frame
    """, "allowed_names", "line 3: introspection attribute .tb_frame"),
    "a module-level loop the state guard never read": ("""
        import math
        TABLE = [0.0] * 8
        for i in range(8):
            TABLE[i] = math.exp(i)
        def kernel(inputs, outputs, sizes):
            pass
    """, "module_level", "line 4: module-level For statement"),
    "a module-level call runs at import": ("""
        import torch
        SCRATCH = torch.empty(1 << 20)
        def kernel(inputs, outputs, sizes):
            pass
    """, "module_level", "line 3: module-level value computes at import: torch.empty(1 << 20)"),
    "eval of a string": ("""
        def kernel(inputs, outputs, sizes):
            eval("__import__('os')")
    """, "allowed_names", "line 3: uses builtin eval, which is not on the allow-list"),
    "getattr with a computed name": ("""
        def kernel(inputs, outputs, sizes):
            f = getattr(outputs, "co" + "py_")
    """, "allowed_names", "line 3: getattr() with a computed name"),
    "getattr of a dunder by literal": ("""
        def kernel(inputs, outputs, sizes):
            g = getattr(kernel, "__globals__")
    """, "allowed_names", "line 3: getattr(..., '__globals__'): dunder attribute"),
    "a builtin shadowed only inside a comprehension": ("""
        def kernel(inputs, outputs, sizes):
            unused = [0 for open in ()]
            open("/tmp/answer")
    """, "allowed_names", "line 4: uses builtin open"),
    "a module passed around as a value": ("""
        import torch
        def pick(m):
            return m.softmax
        def kernel(inputs, outputs, sizes):
            outputs["y"].copy_(pick(torch)(inputs["x"], -1))
    """, "allowed_names", "line 6: uses the module torch as a value"),
    "a library's own imports": ("""
        import triton.language as tl
        def kernel(inputs, outputs, sizes):
            tl.core.builtins.exec("import os")
    """, "allowed_names", "line 4: uses triton.language.core.builtins.exec, which is not on"),
    "a class with dunder methods": ("""
        class Sneaky:
            pass
        def kernel(inputs, outputs, sizes):
            pass
    """, "allowed_names", "line 2: defines class Sneaky"),
    "a decorator off the list": ("""
        import torch
        @torch.no_grad()
        def kernel(inputs, outputs, sizes):
            pass
    """, "module_level", "line 3: decorator torch.no_grad on kernel"),
    "an attribute set on an input": ("""
        def kernel(inputs, outputs, sizes):
            inputs["x"].answer = outputs["y"]
    """, "no_state", "line 3: assigns attribute inputs['x'].answer"),
    "global state": ("""
        calls = 0
        def kernel(inputs, outputs, sizes):
            global calls
            calls += 1
    """, "no_state", "line 4: declares global calls"),
    "an import off the list": ("""
        import ctypes
        def kernel(inputs, outputs, sizes):
            pass
    """, "allowed_imports", "line 2: imports ctypes, which is not on the triton allow-list"),
    "writing the environment": ("""
        import os
        def kernel(inputs, outputs, sizes):
            os.environ["KEEP"] = "1"
    """, "allowed_names", "line 4: uses os.environ, which is not on the triton allow-list"),
}


@pytest.mark.parametrize("name", list(PY_ATTACKS))
def test_python_attacks_are_rejected_by_the_allow_lists(name):
    source, guard, message = PY_ATTACKS[name]
    hits = found(source)
    assert any(h.startswith(f"{guard}: {message}") for h in hits), hits


@pytest.mark.parametrize("backend, source", [
    ("torch", "import torch\ndef kernel(inputs, outputs, sizes):\n    torch.set_num_threads(1)\n"),
    ("torch", "import torch.nn.functional as F\ndef kernel(inputs, outputs, sizes):\n"
              "    F.importlib.import_module('os')\n"),
    ("torch", "import torch\ndef kernel(inputs, outputs, sizes):\n    torch.load('answer.pt')\n"),
    ("numpy", "import numpy as np\ndef kernel(inputs, outputs, sizes):\n    np.load('a.npy')\n"),
    ("numpy", "import numpy as np\ndef kernel(inputs, outputs, sizes):\n"
              "    np.ctypeslib.as_array(0)\n"),
    ("numpy", "from kdsl.backends.array import numpy_runtime as rt\n"
              "def kernel(inputs, outputs, sizes):\n    rt.torch.softmax(inputs['x'], -1)\n"),
])
def test_each_backends_vocabulary_is_its_own(backend, source):
    hits = found(source, backend=backend)
    assert any(h.startswith("allowed_names: line 3: uses ") for h in hits), hits


def test_what_the_generators_write_is_allowed():
    source = """
        \"\"\"docstring\"\"\"
        import os
        import math
        import torch
        import triton
        import triton.language as tl
        from triton.language.extra import libdevice

        _INTERP = tl.constexpr(os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true"))
        _PTX = tl.constexpr(bool(_INTERP) and torch.version.hip is None)
        LIMIT = 2 ** 31
        DIMS = ("M", "N")
        GENOME = {"BLOCK": 128, "num_warps": 4}

        @triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=4)], key=["N"])
        @triton.heuristics({"EVEN": lambda args: args["N"] % 64 == 0})
        @triton.jit
        def _k(x_ptr, N, BLOCK: tl.constexpr, EVEN: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < N)
            tl.store(x_ptr + offs, libdevice.tanh(x) * math.pi, mask=offs < N)

        def _smem(device, default=LIMIT):
            props = torch.cuda.get_device_properties(device)
            return int(getattr(props, "shared_memory_per_block_optin", 0) or default)

        def kernel(inputs, outputs, sizes):
            y = outputs["y"]
            n = y.numel()
            grid = (triton.cdiv(n, GENOME["BLOCK"]),)
            _k[grid](y, n)
    """
    assert found(source) == []


HONEST_C_OMP = r"""
    #include <math.h>
    #include <omp.h>
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>
    void kdsl_f32(void **in, void **out, const int64_t *sizes) {
      const float *x = in[0]; float *y = out[0]; int64_t m = sizes[0], n = sizes[1];
      float *scratch = malloc(sizeof(float) * (size_t)omp_get_max_threads() * 16);
      #pragma omp parallel
      {
        int t = omp_get_thread_num();
        memset(scratch + 16 * t, 0, 16 * sizeof(float));
        #pragma omp for schedule(dynamic, 4)
        for (int64_t i = 0; i < m; i++) {
          float acc = 0.0f;
          #pragma omp simd reduction(+:acc)
          for (int64_t j = 0; j < n; j++) acc += expf(x[i * n + j]);
          for (int64_t j = 0; j < n; j++) y[i * n + j] = expf(x[i * n + j]) / acc;
        }
      }
      free(scratch);
    }
"""

C_ATTACKS = {
    "the Python C API, token-pasted": (r"""
        #define CAT(a, b) a##b
        int CAT(PyRun_, SimpleString)(const char *);
        void kdsl_f32(float *x) { CAT(PyRun_, SimpleString)("import torch"); }
    """, [("allowed_names", "references PyRun_SimpleString: the Python C API"),
          ("no_torch_compute", "line 4: calls back into Python: PyRun_SimpleString")]),
    "static state behind a macro": (r"""
        #define KEEP static
        KEEP float cache[1024];
        void kdsl_f32(float *x, float *y) { y[0] = cache[0]; cache[0] = x[0]; }
    """, [("no_state", "writable data in .bss (4096 bytes: cache)"),
          ("no_state", "line 3: file-scope variable 'static float cache[1024]'")]),
    "omp_set_num_threads slows the baseline": (r"""
        #include <omp.h>
        #define ONE(f) omp_set_##f(1)
        void kdsl_f32(float *x) { ONE(num_threads); x[0] = 0; }
    """, [("allowed_names", "references omp_set_num_threads: changes the OpenMP runtime")]),
    "a pointer kept in the environment": (r"""
        #include <stdlib.h>
        #include <stdint.h>
        void kdsl_f32(float *x) {
          char *p = getenv("K");
          if (!p) setenv("K", "1", 1);
          x[0] = (float)(uintptr_t)p;
        }
    """, [("allowed_names", "references getenv: the process environment"),
          ("allowed_names", "references setenv: the process environment")]),
    "dlopen behind a macro": (r"""
        void *dlopen(const char *, int);
        #define OPEN(x) dl##open(x, 2)
        void kdsl_f32(float *x) { OPEN("libtorch_cpu.so"); }
    """, [("allowed_names", "references dlopen: loads code at run time"),
          ("no_dynamic_code", "line 4: loads code at run time: dlopen")]),
    "a thread left running": (r"""
        typedef unsigned long pthread_t;
        int pthread_create(pthread_t *, const void *, void *(*)(void *), void *);
        static void *work(void *a) { return a; }
        void kdsl_f32(float *x) { pthread_t t; pthread_create(&t, 0, work, x); }
    """, [("allowed_names", "references pthread_create: starts a thread or process")]),
    "a constructor run at load": (r"""
        extern int ready;
        __attribute__((constructor)) static void early(void) { ready = 1; }
        void kdsl_f32(float *x) { x[0] = 1; }
    """, [("module_level", "code run at load (.init_array)")]),
    "a system call in inline assembly": (r"""
        void kdsl_f32(float *x) {
          long r; __asm__ volatile ("syscall" : "=a"(r) : "a"(39)); x[0] = r; }
    """, [("no_dynamic_code", "line 3: inline assembly (__asm__)")]),
    "thread-local state": (r"""
        __thread float last;
        void kdsl_f32(float *x) { x[0] = last; last = x[1]; }
    """, [("no_state", "writable data in .tbss (4 bytes: last)")]),
    "the environment read directly": (r"""
        extern char **environ;
        void kdsl_f32(float *x) { x[0] = environ[0][0]; }
    """, [("allowed_names", "references environ: the process environment")]),
    "a header off the list": (r"""
        #include <stdio.h>
        void kdsl_f32(float *x) { printf("%f", x[0]); }
    """, [("allowed_imports", "includes /usr/include/stdio.h"),
          ("allowed_names", "references printf: not on the allow-list")]),
    "reading the caller's frame": (r"""
        void kdsl_f32(float *x) { void *f = __builtin_frame_address(1); x[0] = *(float *)f; }
    """, [("no_dynamic_code", "line 2: reaches into the call stack: __builtin_frame_address")]),
}


def test_an_honest_openmp_kernel_passes_every_guard():
    assert found(HONEST_C_OMP, backend="c", language="c") == []


@pytest.mark.parametrize("name", list(C_ATTACKS))
def test_c_attacks_are_rejected_after_preprocessing_and_by_their_symbols(name):
    source, expected = C_ATTACKS[name]
    hits = found(source, backend="c", language="c")
    for guard, message in expected:
        assert any(h.startswith(f"{guard}: {message}") for h in hits), (guard, message, hits)


def test_c_that_does_not_compile_cannot_vouch_for_its_symbols():
    hits = found("void kdsl_f32(float *x) { x[0] = ; }\n", backend="c", language="c")
    assert any(h.startswith("allowed_names: does not compile to an object") for h in hits), hits
