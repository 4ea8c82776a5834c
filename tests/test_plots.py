"""Plot helpers: each returns a figure with one line (error-bar container) per group and one point per x."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402

from specdec_lib.reporting import plots  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _containers(ax):
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def _summary():
    rows = []
    for T in (0.2, 0.6, 1.0):
        for v in ("token", "block"):
            for g in (1, 2, 4, 8):
                m = 1 + 0.1 * g + (0.05 if v == "block" else 0) - 0.2 * T
                rows.append({"temperature": T, "verifier": v, "gamma": g, "mean": m, "ci_low": m - 0.02,
                             "ci_high": m + 0.03, "theory": m + 0.01})
    return pd.DataFrame(rows)


def test_ci_lines_one_errorbar_line_per_group_and_one_point_per_x():
    fig = plots.ci_lines(_summary(), x="gamma", hue="temperature", style="verifier")
    (ax,) = fig.axes
    bars = _containers(ax)
    assert len(bars) == 6 and plots.errorbar_count(fig) == 6
    for c in bars:
        x, y = c.lines[0].get_data()
        assert list(x) == [1, 2, 4, 8] and len(y) == 4
        assert c.has_yerr
    labels = ax.get_legend_handles_labels()[1]
    assert "temperature=0.2, token" in labels


def test_ci_lines_panels_theory_and_interval_width():
    frame = _summary()
    fig = plots.ci_lines(frame, x="gamma", hue="verifier", col="temperature", theory="theory")
    assert len(fig.axes) == 3
    for ax in fig.axes:
        assert len(_containers(ax)) == 2
        dashed = [ln for ln in ax.lines if ln.get_linestyle() == "--" and len(ln.get_xdata())]
        assert len(dashed) == 2 and all(len(ln.get_xdata()) == 4 for ln in dashed)
        assert "theory (dashed)" in ax.get_legend_handles_labels()[1] if ax is fig.axes[-1] else True
    # the bars span [ci_low, ci_high]
    bar = _containers(fig.axes[0])[0]
    segments = bar.lines[2][0].get_segments()
    first = frame.query("temperature == 0.2 and verifier == 'block'").sort_values("gamma").iloc[0]
    assert [segments[0][0][1], segments[0][1][1]] == pytest.approx([first["ci_low"], first["ci_high"]])


def test_gain_plot_percent_zero_line_and_nan_ci():
    gains = pd.DataFrame({"n": [1, 2, 3], "gain": [0.0, 0.01, 0.02], "ci_low": [np.nan, 0.0, 0.01],
                          "ci_high": [np.nan, 0.02, 0.03]})
    fig = plots.gain_plot(gains, x="n")
    (ax,) = fig.axes
    (bar,) = _containers(ax)
    assert list(bar.lines[0].get_ydata()) == pytest.approx([0.0, 1.0, 2.0])
    assert any(list(ln.get_ydata()) == [0, 0] for ln in ax.lines)  # the zero line
    se = pd.DataFrame({"k": [1, 2], "gap": [0.1, 0.2], "se": [0.01, 0.02], "other": ["a", "a"]})
    fig = plots.gain_plot(se, x="k", y="gap", se="se", hue="other", percent=False)
    assert plots.errorbar_count(fig) == 1


def test_ccdf_lines_points_and_wilson():
    rows = [{"verifier": v, "k": k, "exact": 0.5 ** k, "sampled": 0.5 ** k, "paper": 0.5 ** k}
            for v in ("token", "block", "greedy_block") for k in range(11)]
    fig = plots.ccdf(pd.DataFrame(rows), samples=300)
    (ax,) = fig.axes
    assert len(_containers(ax)) == 3
    exact = [ln for ln in ax.lines if ln.get_label().endswith("(exact)")]
    assert len(exact) == 3 and all(len(ln.get_xdata()) == 11 for ln in exact)
    p = np.array([0.0, 0.5, 1.0])
    low, high = plots.wilson_interval(p, 100)
    assert np.all(low <= p + 1e-12) and np.all(high >= p - 1e-12)
    assert 0.39 < low[1] < 0.41 and 0.59 < high[1] < 0.61


def test_compare_lines_g_curves_and_positional_law():
    fb = pd.DataFrame({"n": [1, 2, 3], "SpS ours": [1.8, 2.4, 2.9], "SpS spec": [1.8, 2.4, 2.9],
                       "ASpS ours": [1.8, 2.5, 3.1], "ASpS spec": [1.8, 2.5, 3.1]})
    fig = plots.compare_lines(fb, "n", {"SpS": "SpS ours", "ASpS": "ASpS ours"}, {"SpS": "SpS spec", "ASpS": "ASpS spec"})
    assert len(fig.axes[0].lines) == 4

    curves = pd.DataFrame([{"method": m, "strategy": s, "k": k, "mean": 1 + np.log(k), "ci_low": 1, "ci_high": 3,
                            "theory": 1 + np.log(k)} for m in ("GSS", "ERSS") for s in ("batch", "sequence")
                           for k in (1, 2, 4)])
    bounds = pd.DataFrame([{"method": m, "k": k, "lemma43_min": 5.0, "lemma43_fixed": 6.0}
                           for m in ("GSS", "ERSS") for k in (1, 2, 4)])
    fig = plots.g_curves(curves, bounds)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert len(_containers(ax)) == 2 and ax.get_xscale() == "log"
        assert sum(ln.get_label().startswith("Lemma 4.3") for ln in ax.lines) == 2

    law = pd.DataFrame(np.random.default_rng(0).dirichlet(np.ones(6), size=20)[:, :5], columns=[f"p{i}" for i in range(1, 6)])
    fig = plots.positional_law({"GSS": law, "ERSS": law * 0.9}, max_index=4)
    bars = _containers(fig.axes[0])
    assert len(bars) == 2 and list(bars[0].lines[0].get_xdata()) == [1, 2, 3, 4]


def test_gain_with_theory_draws_the_measured_gain_and_a_wider_theory_line():
    gains = pd.DataFrame({"k": [2, 4, 8], "gain": [-0.03, -0.06, -0.04], "ci_low": [-0.05, -0.08, -0.07],
                          "ci_high": [-0.01, -0.04, -0.01]})
    theory = {1: -0.02, 2: -0.04, 8: -0.05, 256: 0.001}
    fig = plots.gain_with_theory(gains, theory, theory_label="0th-order")
    (ax,) = fig.axes
    (bar,) = _containers(ax)
    assert list(bar.lines[0].get_ydata()) == pytest.approx([-3.0, -6.0, -4.0]) and bar.get_label() == "measured (95% CI)"
    (dashed,) = [ln for ln in ax.lines if ln.get_label() == "0th-order"]
    assert list(dashed.get_xdata()) == [1, 2, 8, 256] and list(dashed.get_ydata()) == pytest.approx([-2.0, -4.0, -5.0, 0.1])
    assert any(list(ln.get_ydata()) == [0, 0] for ln in ax.lines) and ax.get_xscale() == "log"
    with pytest.raises(ValueError, match="theory"):
        plots.gain_with_theory(gains, {})


def test_forest_one_row_per_comparison_per_panel_with_its_interval():
    rel = pd.DataFrame({"temperature": [0.6, 0.6, 0.6, 1.0, 1.0, 1.0],
                        "relation": ["b vs a", "c vs a", "d vs a"] * 2,
                        "gain": [0.02, 1.5, 0.0, 0.03, 2.0, 0.0],
                        "ci_low": [0.01, 1.2, np.nan, 0.01, 1.8, np.nan],
                        "ci_high": [0.03, 1.9, np.nan, 0.05, 2.2, np.nan]})
    fig = plots.forest(rel, "relation", col="temperature")
    assert len(fig.axes) == 2 and plots.errorbar_count(fig) == 2
    for ax in fig.axes:
        (bar,) = _containers(ax)
        x, y = bar.lines[0].get_data()
        assert list(y) == [0, 1, 2] and ax.get_xscale() == "symlog"
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["b vs a", "c vs a", "d vs a"]
    (bar,) = _containers(fig.axes[0])
    assert list(bar.lines[0].get_xdata()) == pytest.approx([2.0, 150.0, 0.0])
    segments = bar.lines[2][0].get_segments()  # percent; the NaN interval draws a bar of zero length
    assert [segments[1][0][0], segments[1][1][0]] == pytest.approx([120.0, 190.0])
    assert segments[2][0][0] == segments[2][1][0] == pytest.approx(0.0)
    assert fig.axes[0].get_title() == "temperature=0.6"
    linear = plots.forest(rel.query("temperature == 0.6"), "relation", linthresh=None, percent=False)
    assert linear.axes[0].get_xscale() == "linear"
    with pytest.raises(ValueError, match="label"):
        plots.forest(rel, "comparison")
    # a repeated comparison within a panel would be drawn as one of its rows only: refused
    with pytest.raises(ValueError, match="more than once"):
        plots.forest(rel, "relation")
    assert plots.errorbar_count(plots.forest(rel.query("temperature == 1.0"), "relation")) == 1
