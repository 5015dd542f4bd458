"""GPU memory the candidate's process maps, kept apart from the judge's own.

CUDA IPC hands another process a tensor's whole cudaMalloc segment, not the tensor: the
receiver opens the segment's handle and may address every byte of it. torch's caching
allocator packs many tensors into one segment, so the judge's own tensors (the kept outputs
of the checked calls, the inputs' pristine copies, the oracle's results, a pristine copy
of a varied input) could lie in memory the candidate's process has mapped, where a kernel
with raw pointers could find and rewrite them. Every CUDA tensor handed to the candidate
is therefore allocated from a private memory pool (``torch.cuda.MemPool``), whose segments
hold nothing but such tensors, or moved there before it is sent (``confine``).

A segment the pool gets from the driver may hold what this process freed before (the
driver clears memory between processes, not within one): the float64 oracle of an earlier
job, say. So the free part of every new segment is zeroed as it first appears
(``allocating``); what the pool frees later held only what the candidate saw anyway.

One pool a device, replaced at ``release`` (the end of each evaluation): a live pool keeps
its freed blocks for itself, where the judge's next oracle could not use them."""
from __future__ import annotations

import contextlib

_POOLS: dict = {}  # device index -> the current MemPool
_CLEAN: set = set()  # (pool id, segment address) of the segments zeroed beyond their tensors


def _index(device) -> int:
    import torch
    d = torch.device(device)
    return d.index if d.index is not None else torch.cuda.current_device()


def _pool(device):
    import torch
    i = _index(device)
    if not hasattr(torch.cuda, "MemPool"):  # (torch 2.11 and 2.13 have it)
        raise RuntimeError(f"torch {torch.__version__} has no torch.cuda.MemPool: a GPU "
                           "evaluation needs one to keep the judge's memory out of what "
                           "the candidate maps (torch 2.11 and 2.13 have it)")
    if i not in _POOLS:
        with torch.cuda.device(i):  # (a pool belongs to the device current at its making)
            _POOLS[i] = torch.cuda.MemPool()
    return _POOLS[i]


def _is_cuda(device) -> bool:
    return str(device).startswith("cuda")


@contextlib.contextmanager
def allocating(device):
    """The block's allocations on ``device`` from the pool (on a CPU, nothing changes:
    shared memory there is a file of the tensor's own, ``correctness.empty``). Keep the
    block to the allocations of tensors the candidate will see: whatever else is
    allocated in it lands in memory the candidate maps."""
    if not _is_cuda(device):
        yield
        return
    import torch
    with torch.cuda.use_mem_pool(_pool(device), device=_index(device)):
        yield
    _zero_new_segments(device)


def _pool_segments(device) -> list[dict]:
    """The pool's segments on ``device``, as the allocator's snapshot describes them."""
    import torch
    pool, i = _pool(device), _index(device)
    # (the whole allocator's snapshot, read by each segment's owner: not every torch
    # takes a pool in ``memory_snapshot``)
    return [s for s in torch.cuda.memory_snapshot()
            if s.get("device") == i and tuple(s.get("segment_pool_id", ())) == tuple(pool.id)]


def _segments(device) -> list[tuple[int, int]]:
    """The pool's segments on ``device``, as (start, end) addresses."""
    return [(s["address"], s["address"] + s["total_size"]) for s in _pool_segments(device)]


class _Span:
    """Device memory at an address, as ``torch.as_tensor`` takes it (CUDA array interface),
    to be zeroed in place."""

    def __init__(self, address: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (address, False), "version": 2}


def _zero_new_segments(device) -> None:
    """Every byte of the pool's segments not seen before that no tensor holds, zeroed: the
    free blocks, and the rounding past each tensor's requested size."""
    import torch
    pool_id = tuple(_pool(device).id)
    for seg in _pool_segments(device):
        key = (pool_id, seg["address"])
        if key in _CLEAN:
            continue
        at = seg["address"]
        for block in seg["blocks"]:
            at = block.get("address", at)
            used = block.get("requested_size", block["size"]) \
                if block["state"] == "active_allocated" else 0
            if block["size"] > used:
                torch.as_tensor(_Span(at + used, block["size"] - used),
                                device=torch.device("cuda", _index(device))).zero_()
            at += block["size"]
        _CLEAN.add(key)


def _inside(storage, segments: list[tuple[int, int]]) -> bool:
    start = storage.data_ptr()
    end = start + storage.nbytes()
    return any(lo <= start and end <= hi for lo, hi in segments)


def confine(tensors) -> None:
    """Each CUDA tensor of ``tensors`` whose storage lies outside the pool moved into it,
    in place: the same tensor objects, their values copied, tensors that shared a storage
    sharing the new one. A safety net: the judge allocates what it sends from the pool
    (``correctness.empty``), so this copies only what a new path forgot."""
    import torch
    segments: dict = {}
    moved: dict = {}  # old storage's address -> its copy in the pool
    for t in tensors:
        if not t.is_cuda:
            continue
        storage = t.untyped_storage()
        key = (t.device, storage.data_ptr())
        if key not in moved:
            if t.device not in segments:
                segments[t.device] = _segments(t.device)
            if _inside(storage, segments[t.device]):
                continue
            with allocating(t.device):
                fresh = torch.empty(storage.nbytes(), dtype=torch.uint8, device=t.device)
            fresh.untyped_storage().copy_(storage)
            moved[key] = fresh.untyped_storage()
        t.set_(moved[key], t.storage_offset(), t.size(), t.stride())


def release(device) -> None:
    """A new pool for the next evaluation. This one's segments go back to the device once
    nothing holds their blocks, at the worker's next ``empty_cache``."""
    if _is_cuda(device):
        _POOLS.clear()  # (every device's: one job's; and no CUDA call where none was made)
