"""Policy arithmetic, driven by deterministic rewards (no evaluation at all)."""
from __future__ import annotations

import math

import pytest

from kdsl.backends.base import Gene, Space

from kdsl.search.policies import UCT, POLICIES, ROOT, Evolution, Greedy, RandomSampling, make


def drive(policy, reward_of, n):
    """Propose one at a time, reward immediately; returns the proposals."""
    out = []
    for _ in range(n):
        p = policy.propose(1)[0]
        out.append(p)
        policy.observe([(p.node, reward_of(p))])
    return out


def test_starts_then_draft_phase():
    pol = UCT(seed=0, starts=2, draft=3)
    props = drive(pol, lambda p: 1.0, 5)
    assert [p.kind for p in props] == ["start", "start", "draft", "draft", "draft"]
    assert [p.start_index for p in props[:2]] == [0, 1]
    assert all(p.parents == (ROOT,) for p in props)
    assert [p.node for p in props] == [1, 2, 3, 4, 5]


def test_ucb_formula_normalizes_by_best():
    pol = UCT(seed=0, starts=0, draft=2, c=0.5)
    drive(pol, lambda p: {1: 2.0, 2: 4.0}[p.node], 2)
    child = pol.tree.nodes[1]
    expected = (2.0 / 1) / 4.0 + 0.5 * math.sqrt(math.log(2) / 1)
    assert pol.ucb(pol.tree.nodes[ROOT].visits, child) == pytest.approx(expected)
    assert pol.ucb(2, type(child)(99, (ROOT,))) == math.inf  # unvisited first


def test_backpropagation_updates_the_whole_path():
    pol = UCT(seed=0, starts=0, draft=1, k=10.0, crossover=0.0)
    drive(pol, lambda p: 1.0, 1)          # node 1 under the root
    p = pol.propose(1)[0]                 # widening k=10: the root drafts again
    assert p.kind == "draft"
    pol.observe([(p.node, 3.0)])
    root = pol.tree.nodes[ROOT]
    assert root.visits == 2 and root.total == pytest.approx(4.0)
    # a pending proposal counts as a visit with no reward yet (virtual loss)
    q = pol.propose(1)[0]
    assert pol.tree.nodes[ROOT].visits == 3 and pol.tree.nodes[ROOT].total == pytest.approx(4.0)
    pol.observe([(q.node, 0.5)])
    for a in pol.tree.path(q.node):
        assert pol.tree.nodes[a].total >= 0.5


def test_progressive_widening_bounds_children():
    pol = UCT(seed=1, starts=0, draft=1, k=1.0, alpha=0.5, crossover=0.0)
    drive(pol, lambda p: 1.0 + 0.001 * p.node, 60)
    for node in pol.tree.nodes.values():
        if node.id == ROOT:
            continue
        # children were added while visits grew; never more than the bound allows now
        assert len(node.children) <= pol.allowed_children(node.visits)
    assert len(pol.tree.nodes[ROOT].children) <= pol.allowed_children(61)
    assert max(len(n.children) for n in pol.tree.nodes.values()) < 60


def test_tie_breaking_prefers_lowest_id():
    pol = UCT(seed=0, starts=0, draft=3, k=0.1, crossover=0.0)  # k small: no root widening
    drive(pol, lambda p: 1.0, 3)  # three identical children of the root
    p = pol.propose(1)[0]
    assert p.kind == "mutate" and p.parents == (1,)


def test_mcts_descends_to_the_better_subtree():
    pol = UCT(seed=0, starts=0, draft=2, c=0.1, k=0.5, crossover=0.0)
    drive(pol, lambda p: {1: 1.0, 2: 3.0}.get(p.node, 2.0), 2)
    p = pol.propose(1)[0]
    assert p.parents == (2,)


def test_crossover_children_name_two_parents():
    pol = UCT(seed=3, starts=0, draft=3, crossover=1.0)
    props = drive(pol, lambda p: 1.0 + p.node, 10)
    cross = [p for p in props if p.kind == "crossover"]
    assert cross and all(len(p.parents) == 2 and p.parents[0] != p.parents[1] for p in cross)


def test_greedy_always_mutates_the_best():
    pol = Greedy(seed=0, starts=1, draft=2)
    props = drive(pol, lambda p: {1: 1.0, 2: 5.0, 3: 2.0}.get(p.node, 0.1), 6)
    assert [p.kind for p in props[:3]] == ["start", "draft", "draft"]
    assert all(p.kind == "mutate" and p.parents == (2,) for p in props[3:])


def test_random_only_drafts():
    props = drive(RandomSampling(seed=0, starts=1), lambda p: 1.0, 10)
    assert [p.kind for p in props[1:]] == ["draft"] * 9


def test_evolution_tournament_from_population():
    pol = Evolution(seed=0, starts=0, population=4, tournament=2, crossover=0.5)
    props = drive(pol, lambda p: float(p.node % 5), 30)
    assert [p.kind for p in props[:4]] == ["draft"] * 4
    later = props[4:]
    assert {p.kind for p in later} <= {"mutate", "crossover"}
    assert any(p.kind == "crossover" for p in later)
    # parents always come from the population of the best evaluated nodes at that time
    assert all(pol.tree.nodes[q].reward > 0 for p in later for q in p.parents)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_same_seed_same_proposals(name):
    space = Space((Gene("strategy", ("a", "b")), Gene("tile", (16, 32, 64, 128), ordered=True)))

    def run():
        pol = make(name, seed=7, starts=1, spaces={"fake": space})
        return [(p.node, p.parents, p.kind) for p in
                drive(pol, lambda p: 1.0 + (p.node * 37 % 11) / 10, 40)]
    assert run() == run()


def test_parallel_proposals_are_distinct_nodes():
    pol = UCT(seed=0, starts=1, draft=2)
    batch = pol.propose(4)
    assert len({p.node for p in batch}) == 4
    pol.observe([(p.node, 1.0) for p in batch])
    with pytest.raises(ValueError):
        pol.observe([(batch[0].node, 1.0)])


def test_max_backup_values_a_subtree_by_its_best_kernel():
    def grown(backup):
        pol = UCT(seed=0, starts=0, c=0.0, backup=backup)
        t = pol.tree
        a = t.add((ROOT,))
        t.observe(a.id, 4.0)                   # a fast kernel...
        b = t.add((a.id,))
        t.observe(b.id, 0.0)                   # ...whose child failed
        return pol, a
    mean, a_mean = grown("mean")
    best, a_best = grown("max")
    assert a_best.best == 4.0 and a_best.visits == 2
    assert mean.ucb(2, a_mean) == pytest.approx((4.0 + 0.0) / 2 / 4.0)
    assert best.ucb(2, a_best) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="backup"):
        UCT(backup="median")
