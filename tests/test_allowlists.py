"""The allow-lists' reading of dotted names: constants named in full are allowed whatever
kind of class holds them; past any other class a name is an unbound method, refused."""
from __future__ import annotations

from kdsl.search.eval import allowlists
from kdsl.search.eval.allowlists import Profile


def test_a_constant_named_in_full_is_allowed_even_when_its_holder_is_a_plain_class(
        monkeypatch):
    # as in a Triton release where PropagateNan is a plain class, not an Enum
    monkeypatch.setattr(allowlists, "_is_class", lambda module, dotted: True)
    prof = Profile("t", {"lib": lambda: frozenset({"PropagateNan", "PropagateNan.ALL",
                                                   "Tensor", "exp"})})
    assert prof.allowed("lib.PropagateNan.ALL")
    assert prof.allowed("lib.exp")
    assert not prof.allowed("lib.Tensor.softmax")   # past a class: an unbound method
    assert not prof.allowed("lib.PropagateNan.NONE")  # not listed in full
    assert not prof.allowed("lib.sort")


def test_past_a_value_the_rest_is_attribute_access(monkeypatch):
    monkeypatch.setattr(allowlists, "_is_class", lambda module, dotted: False)
    prof = Profile("t", {"lib": lambda: frozenset({"float32"})})
    assert prof.allowed("lib.float32.primitive_bitwidth")


def test_the_torch_backend_names_its_operators_by_aten_names_too():
    # an imported module's baseline replays its traced graph: torch.ops.aten.<op>.<overload>
    prof = allowlists.profile("torch")
    assert prof.allowed("torch.ops.aten.leaky_relu.default")  # F.leaky_relu
    assert prof.allowed("torch.ops.aten.mul.Tensor")  # torch.mul
    assert not prof.allowed("torch.ops.aten.from_file.default")  # refused by either name
    assert not prof.allowed("torch.ops.aten._local_scalar_dense.default")
    assert not allowlists.profile("numpy").allowed("torch.ops.aten.mul.Tensor")
