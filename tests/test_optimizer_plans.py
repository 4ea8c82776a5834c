"""hardware.plans and hardware.timed_check: the costs the optimizer plans with (toy and measured), its plans as a
table, plans for GPU-measured shapes, the trees timed against its choice and the predicted-against-measured table;
plots.predicted_against_measured."""

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from specdec_lib import hardware as H, theory  # noqa: E402
from specdec_lib.hardware import plans  # noqa: E402
from specdec_lib.reporting import plots  # noqa: E402

ACC = [0.6, 0.15, 0.08, 0.05, 0.03]
TARGET = {"sizes": [1, 2, 4, 8], "median_s": [0.010, 0.011, 0.013, 0.020]}


class _Model:
    def __init__(self, name):
        self.name, self.vocab_size, self.dtype, self.device = name, 50, "float32", "cpu"


@pytest.fixture
def fake_measurements(monkeypatch):
    """`profile` and `dp_tree_overheads` replaced by fixed numbers; the calls are recorded."""
    calls = []

    def profile(model, sizes, prefix_len=128, repeats=20, warmup=3, label=None, **kwargs):
        calls.append(("profile", model.name, list(sizes), repeats, label))
        if label == "target":
            return {"sizes": list(sizes), "median_s": [TARGET["median_s"][TARGET["sizes"].index(n)] for n in sizes]}
        return {"sizes": [1], "median_s": [0.002 if label == "draft" else 0.004]}

    def overheads(vocab_size, acceptance, sizes, max_depth, temperature=1.0, **kwargs):
        calls.append(("overheads", vocab_size, list(sizes), max_depth, temperature, kwargs["tokens"]))
        return {(n, d): 1e-4 * n for n in sizes for d in range(1, min(max_depth, n) + 1)}, 5e-5

    monkeypatch.setattr(plans, "profile", profile)
    monkeypatch.setattr(plans, "dp_tree_overheads", overheads)
    return calls


def test_toy_costs_plan_on_the_synthetic_profile():
    toy = SimpleNamespace(kind="toy")
    costs = H.machine_costs(toy, toy, ACC, 16, 6, 1.0)
    assert not costs.measured and costs.times == H.TOY_TIMES and costs.draft == costs.regime_draft == H.TOY_DRAFT_COST
    p = H.optimizer_plans(ACC, ACC, costs, 6)
    direct = H.optimize_tree(ACC, H.TOY_TIMES, H.TOY_DRAFT_COST, max_size=32, max_depth=6)
    assert (p.choice.size, p.choice.depth, p.choice.speedup) == (direct.size, direct.depth, direct.speedup)
    assert p.flat == H.optimize_tree(ACC, H.FLAT_TIMES, H.FLAT_DRAFT_COST, max_size=512, max_depth=6)
    assert p.flat.size > p.choice.size   # flatter t(n): a larger tree
    table = H.optimizer_table(p, costs)
    assert table["profile"].tolist() == ["this machine, toy", "this machine, toy, Eq. 1",
                                         "emulated offloading (flat t(n), c = 0.02)"]
    assert list(table.columns) == ["profile", "size", "depth", "G", "predicted speedup"]


def test_measured_costs_profile_both_drafts_then_the_overheads(fake_measurements):
    target, timed, regime = _Model("target"), _Model("distilled"), _Model("int4")
    pair = SimpleNamespace(kind="hf", target=target, draft=regime)
    costs = H.machine_costs(pair, SimpleNamespace(kind="hf", target=target, draft=timed), ACC, 8, 4, 0.6)
    assert fake_measurements == [("profile", "target", [1, 2, 4, 8], 15, "target"),
                                 ("profile", "distilled", [1], 10, "draft"),
                                 ("profile", "int4", [1], 10, "draft (sections 1-3)"),
                                 ("overheads", 50, [1, 2, 4, 8], 4, 0.6, 48)]
    assert costs.measured and costs.times == H.normalised_times(TARGET)
    assert set(costs.profiles()) == {"target", "draft", "regime_draft"}
    table = costs.overhead_table()
    assert table.iloc[-1].tolist() == [1, 0, 5e-5] and len(table) == len(costs.overheads) + 1
    assert costs.level_cost_note() == ("draft level cost / target t(1): timed draft 0.200, "
                                       "sections 1-3's draft 0.400")
    p = H.optimizer_plans(ACC, ACC, costs, 4)
    labels = H.optimizer_table(p, costs)["profile"].tolist()
    assert labels[:3] == ["this machine, timed draft (distilled)",
                          "this machine, timed draft, Eq. 1 alone (no decoder overhead)",
                          "this machine, sections 1-3's draft (int4)"]


def test_one_draft_is_profiled_once(fake_measurements):
    pair = SimpleNamespace(kind="hf", target=_Model("target"), draft=_Model("int4"))
    costs = H.machine_costs(pair, pair, ACC, 4, 4, 1.0)
    assert [c[4] for c in fake_measurements if c[0] == "profile"] == ["target", "draft"]
    assert fake_measurements[0][2] == [1, 2, 4] and costs.regime_name is None
    assert len(H.optimizer_table(H.optimizer_plans(ACC, ACC, costs, 4), costs)) == 3


def test_shape_plans_hold_the_fixed_sizes_and_the_papers_rows():
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    gpu = {"sizes": sizes, "median_s": [0.02 * (1 + n / 512) for n in sizes]}
    draft = {"sizes": [1], "median_s": [0.004]}
    rows, curves = H.shape_plans({0.2: ACC, 1.0: ACC}, {"big": gpu}, draft, 8, {("big", 0.0): "paper row"})
    assert rows["T"].tolist() == [0.2, 1.0] and rows["paper, A100 C4: (size, depth) speedup (G)"].tolist() == ["paper row", "—"]
    plan = H.optimize_tree(ACC, gpu, draft, max_size=256, max_depth=8)
    assert rows.loc[0, "size"] == plan.size and rows.loc[0, "predicted speedup"] == plan.speedup
    _, g, s = H.best_at_size(plan, 128)
    assert rows.loc[0, "fixed 128: speedup (G)"] == f"{s:.2f}× ({g:.2f})"
    assert curves.query("T == 0.2")["size"].tolist() == sizes
    assert [H.table4_temperature(T) for T in (0.0, 0.2, 0.6, 0.65, 1.0)] == [0.0, 0.0, 0.6, 0.6, None]
    times = H.time_table({"big": gpu, "draft": draft})
    assert times["model"].tolist() == ["big"] * len(sizes) + ["draft"] and times["t(n)/t(1)"].iloc[0] == 1.0


def _plan():
    return H.optimize_tree(ACC, H.TOY_TIMES, 0.2, max_size=32, max_depth=6)


def test_timed_trees_are_the_choice_and_the_best_tree_of_each_other_size():
    plan = _plan()
    checks = H.timed_trees(plan, ACC, H.TOY_TIMES, [4, 8, 64], 6)
    assert checks[0]["tree"] == "optimizer's choice" and checks[0]["parents"] == plan.tree
    profiled = sorted(H.TOY_TIMES)
    at = profiled.index(plan.size)
    expected = sorted(({4, 8} | set(profiled[max(0, at - 1): at + 2])) - {plan.size})   # 64 was not profiled
    assert [c["size"] for c in checks[1:]] == expected
    dp = theory.sequoia_table(ACC, 32, 6)
    for c in checks[1:]:
        d, g, s = H.best_at_size(plan, c["size"])
        assert (c["depth"], c["predicted tokens/step"], c["predicted speedup"]) == (d, g, s)
        assert c["parents"] == dp.tree(c["size"], d) and c["tree"] == f"fixed size {c['size']}"
    arms = H.timing_arms(checks)
    assert list(arms) == ["autoregressive"] + [c["tree"] for c in checks] and arms["autoregressive"] is None
    assert arms["optimizer's choice"] == ("token", plan.tree, "without_replacement")


def _rounds(checks):
    cols = {H.profile_column("target", n): [0.010 * H.TOY_TIMES[n], 0.012 * H.TOY_TIMES[n]] for n in H.TOY_TIMES}
    cols[H.profile_column("draft", 1)] = [0.002, 0.003]
    for i, name in enumerate(["autoregressive"] + [c["tree"] for c in checks]):
        cols[H.overhead_column(name)] = [1e-4 * (i + 1), 2e-4 * (i + 1)]
    return pd.DataFrame(cols)


def test_rescored_checks_predict_from_the_rounds():
    checks = H.timed_trees(_plan(), ACC, H.TOY_TIMES, [4], 6)
    rounds = _rounds(checks)
    out = H.rescored_checks(checks, rounds)
    assert "optimizer's speedup (profile before)" not in checks[0]   # the input is left as it was
    assert list(out[0]) == ["tree", "size", "depth", "parents", "predicted tokens/step",
                            "optimizer's speedup (profile before)", "predicted speedup", "Eq. 1 alone speedup",
                            "decoder overhead s/step", "predicted step s"]
    c = out[0]
    assert c["optimizer's speedup (profile before)"] == checks[0]["predicted speedup"]
    assert c["predicted speedup"] == H.round_speedup(rounds, c) == H.speedup_from_round_profiles(
        rounds, c["predicted tokens/step"], c["size"], c["depth"], step_overhead=H.overhead_column(c["tree"]),
        baseline_overhead=H.overhead_column("autoregressive"))
    assert c["decoder overhead s/step"] == pytest.approx(3e-4)   # the median of 2e-4 and 4e-4
    assert c["predicted step s"] == pytest.approx(0.011 * H.TOY_TIMES[c["size"]] + c["depth"] * 0.0025 + 3e-4)


def test_check_table_sets_prediction_beside_measurement():
    checks = H.timed_trees(_plan(), ACC, H.TOY_TIMES, [4], 6)
    checks = H.rescored_checks(checks, _rounds(checks))
    names = [c["tree"] for c in checks]
    timing = pd.DataFrame([{"tree": name, "prompt_id": p, "tokens": 10, "seconds": 1.0 + i, "steps": 5, "draft_s": 0.1}
                           for p in ("a", "b") for i, name in enumerate(["autoregressive"] + names)])
    pooled = H.pooled_steps(timing)
    assert pooled.loc["autoregressive"].tolist() == [20, 2.0, 10, 0.2]
    check = H.check_table(checks, pooled, 0.0025)
    assert list(check.index) == names and "parents" not in check
    assert check.loc[names[0], "measured tokens/step"] == 2.0
    assert check.loc[names[0], "measured step s"] == pytest.approx(4.0 / 10)
    assert check.loc[names[0], "predicted draft s/step"] == check.loc[names[0], "depth"] * 0.0025
    decisions = {name: SimpleNamespace(estimate=0.1 * i, ci_low=0.1 * i - 0.05, ci_high=0.1 * i + 0.05)
                 for i, name in enumerate(names)}
    measured = H.with_measured(check, decisions)
    assert "measured speedup" not in check
    second = measured.loc[names[1]]
    assert second["measured speedup"] == pytest.approx(second["predicted speedup"] * 1.1)
    assert (second["CI low"], second["CI high"]) == pytest.approx((0.05, 0.15))
    assert second["measured / Eq. 1 alone - 1"] == pytest.approx(second["measured speedup"] / second["Eq. 1 alone speedup"] - 1)
    with pytest.raises(ValueError):
        H.with_measured(check, dict(reversed(list(decisions.items()))))
    fig = plots.predicted_against_measured(measured, title="check")
    ax = fig.axes[0]
    assert plots.errorbar_count(fig) == 1 and len(ax.texts) == len(names)
    assert any("(choice)" in t.get_text() for t in ax.texts) and ax.get_title() == "check"
    plt.close(fig)
