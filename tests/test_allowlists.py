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
