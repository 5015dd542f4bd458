"""Requests to a candidate carry the descriptors of shared CPU memory on the candidate's
own socket (``search/eval/fd_passing.py``), never through multiprocessing's
``resource_sharer``, whose listener unpickled what any process of the family sent it (a red
team ran code in the judge that way)."""
from __future__ import annotations

import multiprocessing
from multiprocessing import resource_sharer

import torch

from kdsl.search.eval import fd_passing


def test_shared_tensors_arrive_as_the_same_memory_without_a_listener():
    judge, candidate = multiprocessing.Pipe()
    ins = {"x": torch.arange(300.0).reshape(3, 100).share_memory_(),
           "n": torch.zeros(5, dtype=torch.int64).share_memory_()}
    files = fd_passing.send(judge, ("sets", [ins, ins], 7))
    tag, sets, seven = fd_passing.receive(candidate)
    assert (tag, seven) == ("sets", 7)
    sets[1]["x"][0, 0] = -1.0  # written where the judge reads
    sets[0]["n"][4] = 9
    assert ins["x"][0, 0].item() == -1.0 and ins["n"][4].item() == 9
    assert resource_sharer._resource_sharer._listener is None
    assert len(files) >= 2 and fd_passing.shrunk({k: (fd, n) for fd, k, n in files}) is None


def test_more_descriptors_than_one_message_carries():
    judge, candidate = multiprocessing.Pipe()
    many = [torch.full((4,), float(i)).share_memory_() for i in range(fd_passing.CHUNK + 7)]
    fd_passing.send(judge, many)
    got = fd_passing.receive(candidate)
    assert [t[0].item() for t in got] == [float(i) for i in range(len(many))]
