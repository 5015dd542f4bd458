"""The pool that keeps what the candidate maps apart from the judge's GPU memory
(``search/eval/ipc_pool.py``). Its CUDA path is measured by ``bench/ipc_exposure.py`` on a
GPU; here: the address rule it decides by, and that the CPU path is left as it was."""
import torch

from kdsl.search.eval import correctness as corr
from kdsl.search.eval import ipc_pool, sandbox


class _Storage:
    def __init__(self, start, nbytes):
        self.start, self.n = start, nbytes

    def data_ptr(self):
        return self.start

    def nbytes(self):
        return self.n


def test_a_storage_is_inside_only_when_one_segment_holds_all_of_it():
    segments = [(1000, 3000), (5000, 6000)]
    assert ipc_pool._inside(_Storage(1000, 2000), segments)
    assert ipc_pool._inside(_Storage(5100, 10), segments)
    assert not ipc_pool._inside(_Storage(2500, 1000), segments)   # runs past its segment
    assert not ipc_pool._inside(_Storage(3000, 8), segments)      # between segments
    assert not ipc_pool._inside(_Storage(900, 200), segments)     # starts before one
    assert not ipc_pool._inside(_Storage(1000, 8), [])


def test_on_the_cpu_shared_tensors_are_still_shared_memory_and_confine_leaves_them():
    t = corr.empty((4, 5), torch.float32, "cpu", shared=True)
    assert t.is_shared()
    with ipc_pool.allocating("cpu"):
        u = torch.arange(6.0)
    at = t.data_ptr()
    sent = sandbox._shared({"t": t, "u": u})
    assert sent["t"] is t and sent["u"] is u
    assert t.data_ptr() == at  # already shared: not moved
    assert u.is_shared() and torch.equal(u, torch.arange(6.0))
    ipc_pool.release("cpu")  # nothing to give back on a CPU
    assert not ipc_pool._POOLS
