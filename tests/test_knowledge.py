"""The knowledge base: notes and index, retrieval, op classes, prompt templates, learned store."""
from __future__ import annotations

import functools
import json
import re
import warnings

import pytest

from kdsl import spec
from kdsl.knowledge import learned, notes, retrieval, templates
from kdsl.knowledge.opclass import CLASSES, op_class

BACKENDS = {"any", "triton", "c", "torch", "numpy"}
ALL = notes.load()


def by_name(found):
    return [n.path for n in found]


# ---- notes ---------------------------------------------------------------------

def test_every_note_parses_with_the_four_fields():
    assert 15 <= len(ALL) <= 30
    for n in ALL:
        assert n.kind in notes.NOTE_DIRS
        for f in notes.FIELDS:
            assert n.field(f), (n.path, f)
        assert set(n.backend) <= BACKENDS, n.path
        assert set(n.op_class) <= set(CLASSES) | {"any"}, n.path
        assert n.title and n.body.startswith("# ")
        assert "---" not in n.text.splitlines()[0]


def test_notes_are_short_and_cite_sources():
    for n in ALL:
        lines = n.body.count("\n")
        assert 15 <= lines <= 80, (n.path, lines)
        if n.kind != "constraints":
            assert "Sources:" in n.body, n.path


def test_project_measurements_carry_their_provenance():
    for n in ALL:
        if "measured by this project" in n.body.lower():
            assert "2026-12-02" in n.body, n.path


def test_index_lists_every_note_and_nothing_else():
    index = (notes.root() / "index.md").read_text()
    linked = set(re.findall(r"\]\(([^)]+\.md)\)", index))
    assert linked == {n.path for n in ALL}


def test_parse_errors_name_the_file():
    good = "---\nbackend: c\nhardware: any\nop_class: [scan, sort]\ntopic: x\n---\n# T\nbody\n"
    n = notes.parse(good, "guidance/x.md")
    assert n.op_class == ("scan", "sort") and n.title == "T" and n.kind == "guidance"
    bad = {
        "no front matter": "# T\n",
        "unclosed": "---\nbackend: c\n",
        "missing field": "---\nbackend: c\nhardware: any\nop_class: any\n---\n# T\n",
        "unknown field": good.replace("topic: x", "topic: x\ncolour: red"),
        "any mixed": good.replace("backend: c", "backend: [any, c]"),
        "no title": good.replace("# T", "T"),
    }
    for why, text in bad.items():
        with pytest.raises(notes.NoteError, match="bad.md"):
            notes.parse(text, "bad.md")


def test_empty_or_any_filters_nothing():
    assert all(notes.matches(n, "", "", "") and notes.matches(n, "any", "any", "any")
               for n in ALL)
    assert not notes.matches(notes.parse(
        "---\nbackend: c\nhardware: cpu\nop_class: scan\ntopic: x\n---\n# T\n"),
        "triton", "", "")


def test_hardware_tags_from_device_names():
    assert {"h200", "hopper", "nvidia"} <= notes.hardware_tags("NVIDIA H200")
    assert "hopper" in notes.hardware_tags("NVIDIA H100 80GB HBM3")
    assert {"cdna3", "amd"} <= notes.hardware_tags("AMD Instinct MI300X")
    assert "cpu" in notes.hardware_tags("x86_64")
    assert notes.hardware_tags("") == frozenset()


# ---- retrieval -----------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _library() -> dict:
    return {op.name: op for path in spec.library() for op in spec.load(path).ops}


def _op(name):
    return _library()[name]


def test_softmax_on_h200_gets_constraints_row_reductions_and_hopper():
    op = _op("softmax")
    got = retrieval.retrieve(op.source_text + "\nspeedup 0.8x, 2.9x the floor", "triton", "h200",
                             op_class(op), 8000)
    paths = by_name(got)
    kinds = [n.kind for n in got]
    assert kinds[:5] == ["constraints"] * 5 and "constraints" not in kinds[5:]
    assert "guidance/triton-row-reductions.md" in paths
    assert "hardware/nvidia-hopper-h100-h200.md" in paths
    assert paths.index("guidance/triton-row-reductions.md") == 5  # the best match leads
    assert not any(n.backend == ("c",) for n in got)
    assert "hardware/amd-cdna3-mi300x.md" not in paths


def test_c_on_cpu_gets_openmp_notes_and_no_triton():
    op = _op("layernorm")
    got = retrieval.retrieve(op.source_text, "c", "x86-64", op_class(op), 8000)
    paths = by_name(got)
    assert {"guidance/c-openmp-threads.md", "guidance/c-vectorization.md",
            "hardware/x86-64-avx2-avx512.md"} <= set(paths)
    assert not any(p.startswith("guidance/triton-") for p in paths)
    assert "hardware/nvidia-hopper-h100-h200.md" not in paths


def test_op_class_filters_guidance():
    op = _op("matmul")
    got = by_name(retrieval.retrieve(op.source_text, "triton", "h200", op_class(op), 10**6))
    assert "guidance/triton-matmul.md" in got
    assert "guidance/triton-row-reductions.md" not in got
    assert "guidance/triton-sort-topk.md" not in got


@pytest.mark.parametrize("budget", [0, 100, 450, 1200, 2500, 4000, 7000])
def test_budget_is_respected_and_notes_are_whole(budget):
    op = _op("embedding_bag_sum")
    got = retrieval.retrieve(op.source_text, "triton", "NVIDIA H200", op_class(op), budget)
    assert sum(n.tokens for n in got) <= budget
    assert all(n in ALL for n in got)  # the loaded notes themselves, never cut
    cons = [n for n in got if n.kind == "constraints"]
    assert [n.kind for n in got[:len(cons)]] == ["constraints"] * len(cons)
    if budget >= sum(n.tokens for n in ALL if n.kind == "constraints"):
        assert len(cons) == 5


def test_relevance_orders_by_query():
    pool = tuple(n for n in ALL if n.backend == ("triton",))
    ranked = retrieval.rank("bitonic sort topk ties argsort", list(pool), "triton", "", "")
    assert ranked[0].path == "guidance/triton-sort-topk.md"
    ranked = retrieval.rank("cumsum prefix scan carry", list(pool), "triton", "", "")
    assert ranked[0].path == "guidance/triton-scans.md"
    assert retrieval.relevance("", pool) == [0.0] * len(pool)


def test_render_joins_note_texts():
    got = retrieval.retrieve("softmax", "triton", "h200", "row_reduction", 3000)
    text = retrieval.render(got)
    assert all(n.title in text for n in got) and "backend:" not in text


# ---- op classes ----------------------------------------------------------------

EXPECTED = {
    "conv1d": "contraction", "cross_entropy": "row_reduction", "cumsum_rows": "scan",
    "dlrm_interaction": "contraction", "embedding_bag_sum": "segment",
    "gelu_tanh": "elementwise", "hash_bucketize": "elementwise", "jagged_softmax": "segment",
    "jagged_to_padded_dense": "segment", "layernorm": "row_reduction",
    "log_softmax": "row_reduction", "matmul": "contraction", "matmul_bias_relu": "contraction",
    "max_pool1d": "elementwise", "rmsnorm": "row_reduction", "softmax": "row_reduction",
    "sort_rows": "sort", "swiglu": "elementwise", "topk_rows": "sort",
}


def test_every_library_spec_has_its_class():
    seen = {name: op_class(op) for name, op in _library().items()}
    assert set(seen.values()) <= set(CLASSES)
    for name, want in EXPECTED.items():
        assert seen.get(name) == want, name


def _inline(body: str, decls: str, dims: str, sizes: str, baseline: str):
    text = (f"op t\n  dims {dims}\n{decls}\n  {body}\n  baseline {baseline}\n  tolerance exact\n"
            f"  test {', '.join(f'{d} in 1..8' for d in dims.split(', '))}\n  bench {sizes}\n")
    return spec.parse_text(text).ops[0]


def test_classes_of_small_ops():
    lookup = _inline("y[b, d] = table[idx[b], d]",
                     "  in  table: f32 [V, D]\n  in  idx: i64 [B] in 0..V\n  out y: f32 [B, D]",
                     "V, D, B", "V=8, D=8, B=8", "F.embedding(idx, table)")
    assert op_class(lookup) == "segment"   # a gather through an index tensor, no reduction
    square = _inline("y[i] = sum(j) x[i, j] * x[i, j]", "  in  x: f32 [M, N]\n  out y: f32 [M]",
                     "M, N", "M=8, N=8", "(x * x).sum(-1)")
    assert op_class(square) == "row_reduction"  # the same read twice is not a contraction
    suffix = _inline("y[i, j] = sum(k in j .. N) x[i, k]", "  in  x: f32 [M, N]\n  out y: f32 [M, N]",
                     "M, N", "M=8, N=8", "x.flip(1).cumsum(1).flip(1)")
    assert op_class(suffix) == "scan"  # a running range: a suffix sum written out
    window = _inline("y[i] = sum(k in 0 .. 3) x[i + k] pad(0)", "  in  x: f32 [N]\n  out y: f32 [N]",
                     "N", "N=8", "F.pad(x, (0, 2)).unfold(0, 3, 1).sum(-1)")
    assert op_class(window) != "scan"  # a range of sizes only


# ---- prompt templates ----------------------------------------------------------

def _documented():
    readme = (templates.prompts_dir() / "README.md").read_text()
    head = readme.split("## The templates")[0]
    return set(re.findall(r"^\| `\$([a-z_]+)`", head, re.M))


def test_every_placeholder_is_documented_and_used():
    used = set()
    for name in templates.NAMES:
        used |= templates.placeholders(name)
    assert used == _documented()
    assert templates.placeholders("system") == set()
    assert {"spec_text", "ir_summary", "backend", "device", "parent_source", "feedback",
            "history", "constraints", "knowledge", "timing"} <= templates.placeholders("rewrite")
    assert {"error", "attempt", "max_attempts"} <= templates.placeholders("repair")
    assert {"parent_a_source", "parent_a_result", "parent_b_source",
            "parent_b_result"} <= templates.placeholders("crossover")
    assert "parent_source" not in templates.placeholders("draft")


def test_render_is_strict_and_complete():
    for name in templates.NAMES:
        values = {p: f"<{p}>" for p in templates.placeholders(name)}
        out = templates.render(name, values)
        assert "$" not in out.replace("$$", "")
        assert all(v in out for v in values.values())
    with pytest.raises(KeyError, match="error"):
        templates.render("repair", {"spec_text": "x"})


def test_system_prompt_states_the_contract_and_reply_format():
    text = templates.text("system")
    assert "kernel(inputs: dict[str, Tensor], outputs: dict[str, Tensor], sizes: dict[str, int])" \
        in text
    for marker in ("<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE", "```python", "```c"):
        assert marker in text


# ---- learned knowledge ---------------------------------------------------------

def node(i, op, parents, ok, speedup, genome=None, backend="triton"):
    return {"id": i, "operator": op, "parents": parents,
            "result": {"ok": ok, "speedup": speedup},
            "candidate": {"backend": backend, "genome": genome or {}}}


def run_nodes():
    """A draft, then 'good' children that mostly beat their parent and 'bad' ones that fail."""
    nodes = [node(0, "sample", [], True, 1.0, {"BLOCK": 64, "num_warps": 4})]
    i = 1
    for k in range(12):
        nodes.append(node(i, "good", [0], True, 1.5 + 0.1 * k,
                          {"BLOCK": 256, "num_warps": 8 if k % 3 else 4}))
        i += 1
        nodes.append(node(i, "bad", [0], k == 0, 0.5, {"BLOCK": 32, "num_warps": 2}))
        i += 1
    nodes.append(node(i, "cross", [1, 3], True, 3.0, {"BLOCK": 256, "num_warps": 8}))
    return nodes


def test_learned_round_trip_and_priors_move_with_evidence(tmp_path):
    path = tmp_path / "k" / "learned.json"
    assert learned.priors(path, "row_reduction", "triton", "cuda") == {}
    assert learned.record_run(path, "row_reduction", "triton", "cuda", run_nodes())
    p = learned.priors(path, "row_reduction", "triton", "cuda")
    assert p["good"] > 1.0 > p["bad"]
    assert all(0.5 <= v <= 2.0 for v in p.values())
    assert learned.gene_hints(path, "row_reduction", "triton", "cuda") == \
        {"BLOCK": 256, "num_warps": 8}
    # other keys are untouched
    assert learned.priors(path, "row_reduction", "c", "cpu") == {}
    # more evidence, stronger priors
    for _ in range(4):
        learned.record_run(path, "row_reduction", "triton", "cuda", run_nodes())
    p2 = learned.priors(path, "row_reduction", "triton", "cuda")
    assert p2["good"] > p["good"] and p2["bad"] <= p["bad"] < 1.0
    data = json.loads(path.read_text())
    entry = data["entries"]["row_reduction|triton|cuda"]
    assert entry["runs"] == 5 and entry["operators"]["good"]["children"] == 60
    text = learned.describe(path)
    assert "row_reduction on triton/cuda" in text and "good" in text and "BLOCK=256" in text


def test_few_observations_stay_near_one(tmp_path):
    path = tmp_path / "learned.json"
    learned.record_run(path, "scan", "c", "cpu",
                       [node(0, "sample", [], True, 1.0, backend="c"),
                        node(1, "lucky", [0], True, 2.0, backend="c")])
    p = learned.priors(path, "scan", "c", "cpu")
    assert 1.0 <= p["lucky"] < 1.15


def test_record_skips_other_backends_and_repeated_runs(tmp_path):
    path = tmp_path / "learned.json"
    nodes = run_nodes() + [node(99, "llm_rewrite", [0], True, 9.0, backend="c")]
    assert learned.record_run(path, "softmax", "triton", "cuda", nodes, run_id="r1")
    assert not learned.record_run(path, "softmax", "triton", "cuda", nodes, run_id="r1")
    assert not learned.record_run(path, "softmax", "triton", "cuda",
                                  [node(0, "x", [], True, 1.0, backend="c")])
    entry = learned.load(path)["entries"]["softmax|triton|cuda"]
    assert entry["runs"] == 1 and "llm_rewrite" not in entry["operators"]


def test_corrupt_store_is_kept_as_bak_and_replaced(tmp_path):
    path = tmp_path / "learned.json"
    path.write_text("{not json")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert learned.priors(path, "sort", "triton", "cuda") == {}
        assert learned.record_run(path, "sort", "triton", "cuda", run_nodes())
    assert (tmp_path / "learned.json.bak").read_text() == "{not json"
    assert learned.priors(path, "sort", "triton", "cuda")["good"] > 1.0
    path.write_text(json.dumps({"version": 1, "entries": {"a|b|c": "oops"}}))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert learned.gene_hints(path, "a", "b", "c") == {}
        assert "no learned knowledge" in learned.describe(path)


def test_unwritable_store_warns_and_never_raises(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.warns(UserWarning):
        assert not learned.record_run(blocker / "learned.json", "sort", "triton", "cuda",
                                      run_nodes())


def test_unknown_fields_survive_a_write(tmp_path):
    path = tmp_path / "learned.json"
    path.write_text(json.dumps({"version": 1, "note": "keep me", "entries": {
        "scan|c|cpu": {"operators": {}, "future": [1, 2]}}}))
    learned.record_run(path, "scan", "c", "cpu", [node(0, "s", [], True, 1.2, backend="c")])
    data = json.loads(path.read_text())
    assert data["note"] == "keep me" and data["entries"]["scan|c|cpu"]["future"] == [1, 2]


def test_default_path_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("KDSL_KNOWLEDGE_DIR", str(tmp_path))
    assert learned.default_path() == tmp_path / "learned.json"
    monkeypatch.delenv("KDSL_KNOWLEDGE_DIR")
    assert learned.default_path().parts[-3:] == ("share", "kdsl", "learned.json")
