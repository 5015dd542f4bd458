"""kdsl import: small modules in KernelBench's form become specs that agree with them."""
from __future__ import annotations

import argparse

import pytest

pytest.importorskip("torch")

from kdsl.agreement import check_agreement  # noqa: E402
from kdsl.errors import UsageError  # noqa: E402
from kdsl.importer import Disagreement, ImportFailure, import_model  # noqa: E402
from kdsl.importer import command, table  # noqa: E402
from kdsl.spec import parse_text  # noqa: E402


def module_file(tmp_path, name, init, forward, inputs, init_inputs="[]"):
    """A module file in KernelBench's form: ``init`` and ``forward[1]`` are method bodies."""
    def body(text):
        return "".join(f"        {line}\n" for line in text.splitlines()) or "        pass\n"
    text = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
            "class Model(nn.Module):\n    def __init__(self, *args):\n"
            "        super().__init__()\n" + body(init) +
            f"    def forward(self, {forward[0]}):\n" + body(forward[1]) +
            f"\ndef get_inputs():\n    return {inputs}\n\n"
            f"def get_init_inputs():\n    return {init_inputs}\n")
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return str(path)


def imported_op(path, verify=True):
    imp = import_model(path)
    op = parse_text(imp.spec_text, f"{imp.name}.kspec").ops[0]
    if verify:  # what `kdsl check` verifies: the baseline against the reference
        a = check_agreement(op, seed=0, per_dtype=2)
        assert a.ok, a.failures
    return imp, op


CASES = {
    # family: (init, (args, body), inputs)
    "linear_relu": ("self.fc = nn.Linear(12, 6)",
                    ("x", "return torch.relu(self.fc(x))"), "[torch.randn(32, 12)]"),
    "bmm_transposed": ("", ("a, b", "return torch.bmm(a.transpose(1, 2), b)"),
                       "[torch.randn(4, 9, 7), torch.randn(4, 9, 5)]"),
    "matmul_broadcast": ("", ("a, b", "return torch.matmul(a, b.T)"),
                         "[torch.randn(3, 8, 10), torch.randn(6, 10)]"),
    "conv2d_grouped": ("self.c = nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2)",
                       ("x", "return self.c(x)"), "[torch.randn(2, 4, 20, 18)]"),
    "conv_transpose1d": ("self.c = nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, bias=False)",
                         ("x", "return self.c(x)"), "[torch.randn(2, 3, 30)]"),
    "conv3d_dilated": ("self.c = nn.Conv3d(2, 3, 2, dilation=2)",
                       ("x", "return self.c(x)"), "[torch.randn(1, 2, 9, 8, 7)]"),
    "pools": ("", ("x", "return F.max_pool1d(x, 3, stride=2, padding=1) + "
                        "F.avg_pool1d(x, 3, stride=2, padding=1)"), "[torch.randn(2, 3, 40)]"),
    "avg_pool2d_exclude_pad": ("", ("x", "return F.avg_pool2d(x, 3, stride=2, padding=1, "
                                         "count_include_pad=False)"), "[torch.randn(2, 3, 15, 16)]"),
    "max_pool3d": ("", ("x", "return F.max_pool3d(x, 2, stride=2)"),
                   "[torch.randn(2, 2, 8, 8, 8)]"),
    "reductions": ("", ("x", "return x.sum(dim=1) + x.mean(dim=1) * x.amax(dim=1) - x.min(dim=1)[0]"),
                   "[torch.randn(4, 50, 6)]"),
    "argmax": ("", ("x", "return torch.argmax(x, dim=2)"), "[torch.randn(4, 5, 60)]"),
    "layer_norm": ("self.n = nn.LayerNorm([8, 6])", ("x", "return self.n(x)"),
                   "[torch.randn(4, 8, 6)]"),
    "batch_norm_train": ("self.n = nn.BatchNorm2d(5)", ("x", "return self.n(x)"),
                         "[torch.randn(4, 5, 6, 6)]"),
    "batch_norm_eval": ("self.n = nn.BatchNorm1d(5)\nself.eval()",
                        ("x", "return self.n(x)"), "[torch.randn(8, 5)]"),
    "group_instance_norm": ("self.g = nn.GroupNorm(2, 6)\nself.i = nn.InstanceNorm2d(6)",
                            ("x", "return self.i(self.g(x))"), "[torch.randn(2, 6, 5, 7)]"),
    "softmaxes": ("", ("x", "return torch.softmax(x, dim=1) + F.log_softmax(x, dim=-1)"),
                  "[torch.randn(6, 40)]"),
    "activations": ("", ("x", "return F.gelu(x) + F.selu(x) + F.elu(x, 0.5) + F.softplus(x) + "
                              "F.leaky_relu(x, 0.1) + F.hardtanh(x, -0.5, 0.5) + "
                              "torch.clamp(x, min=-0.2) + torch.sigmoid(x) * torch.tanh(x) + "
                              "F.hardswish(x) + F.mish(x) + F.gelu(x, approximate='tanh')"),
                    "[torch.randn(8, 33)]"),
    "losses": ("", ("p, t, q", "return F.cross_entropy(p, t) + F.mse_loss(p, q) + "
                               "F.smooth_l1_loss(p, q)"),
               "[torch.randn(16, 10), torch.randint(0, 10, (16,)), torch.randn(16, 10)]"),
    "views": ("", ("x", "y = x.permute(0, 2, 1).reshape(x.shape[0], -1)\n"
                        "z = torch.cat([y[:, 1:], y[:, :1]], dim=1)\n"
                        "return z.view(x.shape[0], x.shape[1], -1).sum(dim=1)"), "[torch.randn(3, 4, 6)]"),
    "two_outputs": ("", ("x", "return torch.exp(x), x.max(dim=1)[1]"), "[torch.randn(5, 7)]"),
    "cumulative": ("", ("x", "return torch.cumsum(x, dim=1) + torch.cumprod(x, dim=1) + "
                             "x.flip(1).cumsum(1).flip(1)"), "[torch.randn(4, 30)]"),
    "fake_quant": ("", ("x", "return (torch.clamp(torch.round(x * 4) + 8, 0, 15) - 8) / 4 + "
                             "torch.floor(x) + torch.ceil(x) + torch.trunc(x)"),
                   "[torch.randn(6, 20)]"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_family_imports_and_agrees(tmp_path, name):
    init, forward, inputs = CASES[name]
    imp, op = imported_op(module_file(tmp_path, name, init, forward, inputs))
    assert imp.checked and imp.name == name
    assert op.bench and op.test is not None


def test_several_ops_become_one_spec_of_several_statements(tmp_path):
    path = module_file(tmp_path, "conv_gn_pool",
                       "self.c = nn.Conv2d(3, 8, 3)\nself.g = nn.GroupNorm(4, 8)\n"
                       "self.bias = nn.Parameter(torch.randn(8, 1, 1))",
                       ("x", "x = self.g(torch.relu(self.c(x)) + self.bias)\n"
                             "return torch.sigmoid(F.max_pool2d(x, 2)).mean(dim=1)"),
                       "[torch.randn(2, 3, 16, 16)]")
    imp, op = imported_op(path)
    assert len(op.ops if hasattr(op, "ops") else [op]) == 1
    assert len(op.statements) >= 4
    names = {t.name for t in op.inputs}
    assert {"c_weight", "c_bias", "g_weight", "g_bias", "bias", "x"} <= names
    bench = dict(op.bench[0].sizes)
    assert sorted(bench.values()) == [2, 16, 16]  # get_inputs()'s dynamic sizes


def test_unmapped_op_is_named(tmp_path):
    path = module_file(tmp_path, "sine", "", ("x", "return torch.sin(x)"), "[torch.randn(4, 4)]")
    with pytest.raises(ImportFailure, match="aten.sin.default"):
        import_model(path)


def test_cli_reports_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "broken.py"
    bad.write_text("class Model(:\n")
    nomodel = tmp_path / "nomodel.py"
    nomodel.write_text("import torch\ndef get_inputs():\n    return []\n")
    sine = module_file(tmp_path, "sine", "", ("x", "return torch.sin(x)"), "[torch.randn(4, 4)]")
    for path, words in ((bad, "syntax error"), (nomodel, "no 'Model'"), (sine, "aten.sin")):
        args = argparse.Namespace(files=[str(path)], out=None, check=True)
        assert command.run(args) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    with pytest.raises(UsageError):
        command.run(argparse.Namespace(files=[str(tmp_path / "missing.py")], out=None, check=True))


def test_cli_writes_spec_file(tmp_path, capsys):
    path = module_file(tmp_path, "relu_mod", "", ("x", "return torch.relu(x)"),
                       "[torch.randn(8, 16)]")
    from kdsl.cli import main
    assert main(["import", path, "--out", str(tmp_path / "specs")]) == 0
    text = (tmp_path / "specs" / "relu_mod.kspec").read_text()
    assert parse_text(text).ops[0].name == "relu_mod"


def test_agreement_catches_a_wrong_mapping(tmp_path, monkeypatch):
    path = module_file(tmp_path, "relu_wrong", "", ("x", "return torch.relu(x)"),
                       "[torch.randn(8, 16)]")
    table.lookup("aten.relu.default")  # fill the table before patching one entry
    wrong = table.TABLE["aten.abs.default"]
    monkeypatch.setitem(table.TABLE, "aten.relu.default", wrong)
    with pytest.raises(Disagreement, match="disagree"):
        import_model(path)
    assert import_model(path, check=False).spec_text  # unchecked, the wrong spec is made


def test_a_value_read_twice_is_computed_once_in_the_baseline(tmp_path):
    """A residual's shared value is bound once (``:=``) where the baseline first evaluates
    it: written out at each read, the baseline did its work twice and every speedup over it
    came out too high."""
    path = module_file(tmp_path, "shared_linear", "self.lin = nn.Linear(32, 32)",
                       ("x", "y = self.lin(x)\nreturn y * torch.sigmoid(y) + y"),
                       "[torch.randn(8, 32)]")
    imp, op = imported_op(path)
    assert op.baseline.source.count("aten.linear") == 1
    assert op.baseline.source.index(":=") < op.baseline.source.index("sigmoid")
