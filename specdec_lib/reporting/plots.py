"""Figures for the notebooks and reports: each helper draws one figure from a results table and returns it.

The notebooks only call these (their cells define no functions); the inline backend shows the figure at the
end of the cell (``plt.show()``). Intervals are drawn as error bars: bootstrap 95% CIs from
`experiments.summarize` / `experiments.paired_gain` (columns ``ci_low`` / ``ci_high``), ±1.96 standard errors
(``se=``), or Wilson intervals for sampled frequencies (`ccdf`). Groups without an interval (NaN) get none.

* `ci_lines` -- a value with its CI against ``x``, one line per hue/style group, one panel per ``col``; an
  optional ``theory`` column is drawn dashed in the group's colour.
* `gain_plot` -- `ci_lines` for relative gains (percent, zero line).
* `ccdf` -- Block Verification's Figure 3: exact CCDF lines, sampled points with Wilson CIs, the paper's values.
* `compare_lines` -- exact values (lines) beside reference values (crosses), e.g. a spec fixture.
* `g_curves` -- ERSS's Figures 3-4: empirical G(k) with CIs, the 0th-order theory and the Lemma 4.3 bounds.
* `positional_law` -- the index distribution r(i) (mean over drafted stars ± 1.96 SE), log scale.
* `forest` -- many paired gains side by side: one row per comparison with its CI, one panel per ``col``.
* `predicted_against_measured` -- measured against predicted speedups with their CIs, the diagonal and a margin.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

Z95 = 1.959963984540054
_STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (3, 1, 1, 1)), "v"), ((0, (5, 2)), "P")]


def _plt():
    # lazy: matplotlib is only needed when a figure is drawn
    import matplotlib.pyplot as plt

    return plt


def _values(frame, key: str | None) -> list:
    if not key:
        return [None]
    return sorted(frame[key].dropna().unique().tolist(), key=lambda v: (isinstance(v, str), v))


def _colours(values: Sequence) -> dict:
    """Numeric hues (e.g. temperatures) on a sequential map, anything else on the categorical cycle."""
    plt = _plt()
    numeric = len(values) > 2 and all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                                      for v in values)
    if numeric:
        cmap = plt.get_cmap("viridis")
        return {v: cmap(0.1 + 0.75 * i / max(len(values) - 1, 1)) for i, v in enumerate(values)}
    cycle = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    return {v: cycle[i % len(cycle)] for i, v in enumerate(values)}


def _label(parts: Iterable[tuple[str | None, Any]]) -> str:
    out = []
    for name, value in parts:
        if name is None:
            continue
        if isinstance(value, float):
            value = f"{value:g}"
        out.append(f"{name}={value}" if name in ("T", "temperature", "k", "n", "size", "gamma") else str(value))
    return ", ".join(out)


def _panels(values: Sequence, width: float, height: float, sharey: bool):
    plt = _plt()
    fig, axes = plt.subplots(1, len(values), figsize=(width * len(values), height), sharey=sharey, squeeze=False)
    return fig, list(axes[0])


def _groups(frame, keys: Sequence[str | None]) -> Iterator[tuple[tuple, Any]]:
    keys = [k for k in keys if k]
    if not keys:
        yield (), frame
        return
    for key, part in frame.groupby(keys, sort=True, dropna=False):
        yield (key if isinstance(key, tuple) else (key,)), part


def _errors(part, y: np.ndarray, lo: str | None, hi: str | None, se: str | None, scale: float):
    """Asymmetric error bars (below, above) or None; NaN intervals give no bar."""
    if se and se in part:
        half = Z95 * scale * part[se].to_numpy(dtype=float)
        half = np.nan_to_num(half, nan=0.0)
        return np.vstack([half, half])
    if lo and hi and lo in part and hi in part:
        low = scale * part[lo].to_numpy(dtype=float)
        high = scale * part[hi].to_numpy(dtype=float)
        if np.all(np.isnan(low)) and np.all(np.isnan(high)):
            return None
        below, above = np.nan_to_num(y - low, nan=0.0), np.nan_to_num(high - y, nan=0.0)
        return np.vstack([np.clip(below, 0, None), np.clip(above, 0, None)])
    return None


def _x_ticks(ax, values: Sequence, logx: bool) -> None:
    """Ticks at the measured x values (when there are few and they are numbers), written plainly on log axes."""
    # lazy: matplotlib is only needed when a figure is drawn
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    numbers = sorted({float(v) for v in values if isinstance(v, (int, float, np.integer, np.floating))})
    if logx:
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
    if 0 < len(numbers) <= 12:
        ax.set_xticks(numbers)
        ax.set_xticklabels([f"{v:g}" for v in numbers])


def ci_lines(frame, x: str, y: str = "mean", lo: str | None = "ci_low", hi: str | None = "ci_high",
             hue: str | None = None, style: str | None = None, col: str | None = None, se: str | None = None,
             theory: str | None = None, theory_label: str = "theory (dashed)", scale: float = 1.0,
             zero: bool = False, logx: bool = False,
             logy: bool = False, xlabel: str | None = None, ylabel: str | None = None, title: str | None = None,
             width: float = 5.2, height: float = 3.8, sharey: bool = True, legend: bool = True):
    """Mean (``y``) with its interval against ``x``: one error-bar line per (``hue``, ``style``) group, one panel
    per ``col`` value. The interval is ``[lo, hi]`` (absolute values, e.g. a bootstrap CI) or ±1.96 ``se``.
    ``theory``: a column drawn as a dashed line in each group's colour. ``scale`` multiplies y and its
    interval (100 for percent); ``zero`` draws y = 0. Returns the figure (one ErrorbarContainer per group)."""
    # lazy: matplotlib is only needed when a figure is drawn
    from matplotlib.lines import Line2D

    cols = _values(frame, col)
    colours = _colours(_values(frame, hue))
    styles = {v: _STYLES[i % len(_STYLES)] for i, v in enumerate(_values(frame, style))}
    fig, axes = _panels(cols, width, height, sharey)
    for ax, cv in zip(axes, cols):
        part_c = frame if col is None else frame[frame[col] == cv]
        for key, part in _groups(part_c, [hue, style]):
            keyd = dict(zip([k for k in (hue, style) if k], key))
            part = part.sort_values(x)
            colour = colours.get(keyd.get(hue)) if hue else colours.get(None, "C0")
            linestyle, marker = styles.get(keyd.get(style), _STYLES[0]) if style else _STYLES[0]
            xs = part[x].to_numpy()
            ys = scale * part[y].to_numpy(dtype=float)
            label = _label([(hue, keyd.get(hue)), (style, keyd.get(style))]) or y
            ax.errorbar(xs, ys, yerr=_errors(part, ys, lo, hi, se, scale), color=colour, linestyle=linestyle,
                        marker=marker, markersize=4, capsize=3, linewidth=1.4, label=label)
            if theory and theory in part:
                ax.plot(xs, scale * part[theory].to_numpy(dtype=float), "--", color=colour, alpha=0.6, linewidth=1,
                        label="_theory")
        if theory and theory in part_c:
            ax.add_line(Line2D([], [], color="grey", linestyle="--", linewidth=1, label=theory_label))
        if zero:
            ax.axhline(0, color="grey", linewidth=0.8)
        if logx:
            ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        _x_ticks(ax, part_c[x].unique().tolist(), logx)
        ax.set_xlabel(xlabel or x)
        if col is not None:
            ax.set_title(f"{col} = {cv:g}" if isinstance(cv, float) else f"{col} = {cv}", fontsize=10)
    axes[0].set_ylabel(ylabel or y)
    if legend and (hue or style or theory):
        axes[-1].legend(fontsize=8)
    if title:
        if col is None:
            axes[0].set_title(title, fontsize=11)
        else:
            fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def gain_plot(frame, x: str, y: str = "gain", lo: str | None = "ci_low", hi: str | None = "ci_high",
              percent: bool = True, ylabel: str | None = None, title: str | None = None, **kwargs):
    """A relative gain (e.g. `experiments.paired_gain`) with its CI against ``x``, in percent, with a zero
    line. Other arguments as `ci_lines`."""
    kwargs.setdefault("zero", True)
    return ci_lines(frame, x, y, lo, hi, scale=100.0 if percent else 1.0,
                    ylabel=ylabel or ("gain (%)" if percent else y),
                    title=title or "paired gain, 95% bootstrap CI over prompts", **kwargs)


def gain_with_theory(frame, theory: Mapping[Any, float], x: str = "k", y: str = "gain", lo: str = "ci_low",
                     hi: str = "ci_high", label: str = "measured (95% CI)", theory_label: str = "theory",
                     logx: bool = True, xlabel: str | None = None, ylabel: str | None = None, title: str | None = None,
                     width: float = 6.4, height: float = 4.2):
    """A measured relative gain with its CI (`gain_plot`, one group) beside a model's prediction ``theory``
    (x -> relative gain, a dashed grey line over its own x values, which may reach beyond the measured ones), in
    percent, with a zero line."""
    if not theory:
        raise ValueError("theory must map at least one x to a predicted gain")
    fig = gain_plot(frame, x, y, lo, hi, logx=logx, xlabel=xlabel, ylabel=ylabel, title=title, width=width,
                    height=height, legend=False)
    ax = fig.axes[0]
    ax.containers[0].set_label(label)
    xs = sorted(theory)
    ax.plot(xs, [100.0 * theory[k] for k in xs], "--", color="grey", linewidth=1.2, label=theory_label)
    _x_ticks(ax, sorted(set(frame[x].tolist()) | set(xs)), logx)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def wilson_interval(p: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """95% Wilson score interval of a frequency ``p`` observed in ``n`` independent samples."""
    p = np.asarray(p, dtype=float)
    if n <= 0:
        return np.full_like(p, np.nan), np.full_like(p, np.nan)
    z2 = Z95 ** 2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return centre - half, centre + half


def ccdf(frame, samples: int | None = None, k: str = "k", exact: str = "exact", sampled: str | None = "sampled",
         paper: str | None = "paper", hue: str = "verifier", title: str | None = None, logy: bool = False,
         width: float = 6.4, height: float = 4.2):
    """P(accepted tokens ≥ k) per ``hue``: exact (lines), sampled (points with 95% Wilson intervals when
    ``samples`` -- the number of sampled drafts -- is given) and the paper's values (open circles).
    One exact line and one error-bar container per verifier."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(width, height))
    names = _values(frame, hue)
    colours = _colours(names)
    for name in names:
        part = frame[frame[hue] == name].sort_values(k)
        ks = part[k].to_numpy()
        ax.plot(ks, part[exact].to_numpy(dtype=float), "-", color=colours[name], linewidth=1.6, label=f"{name} (exact)")
        if sampled and sampled in part:
            s = part[sampled].to_numpy(dtype=float)
            yerr = None
            if samples:
                low, high = wilson_interval(s, int(samples))
                yerr = np.vstack([np.clip(s - low, 0, None), np.clip(high - s, 0, None)])
            ax.errorbar(ks, s, yerr=yerr, fmt="x", color=colours[name], capsize=2, markersize=5,
                        label=f"{name} (sampled{', 95% CI' if samples else ''})")
        if paper and paper in part:
            ax.plot(ks, part[paper].to_numpy(dtype=float), "o", mfc="none", color=colours[name], markersize=7,
                    alpha=0.7, label=f"{name} (paper)")
    if logy:
        ax.set_yscale("log")
    ax.set(xlabel="k", ylabel="P(accepted tokens ≥ k)")
    ax.set_title(title or "CCDF of accepted tokens", fontsize=11)
    ax.legend(fontsize=7, ncol=1 if len(names) < 3 else 2)
    fig.tight_layout()
    return fig


def compare_lines(frame, x: str, ours: Mapping[str, str], reference: Mapping[str, str] | None = None,
                  xlabel: str | None = None, ylabel: str | None = None, title: str | None = None,
                  reference_label: str = "reference", width: float = 6.0, height: float = 4.0):
    """Our values (``ours``: label -> column; lines with markers) beside reference values (``reference``:
    label -> column; crosses in the same colour), against ``x``. One line per ``ours`` entry."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(width, height))
    data = frame.sort_values(x)
    for i, (label, column) in enumerate(ours.items()):
        colour = f"C{i}"
        ax.plot(data[x], data[column], "-o", color=colour, markersize=4, label=f"{label} (ours)")
        if reference and label in reference:
            ax.plot(data[x], data[reference[label]], "x", color="black" if len(ours) == 1 else colour,
                    markersize=9, label=f"{label} ({reference_label})")
    ax.set(xlabel=xlabel or x, ylabel=ylabel or "value")
    if title:
        ax.set_title(title, fontsize=11)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def g_curves(curves, bounds=None, x: str = "k", panel: str = "method", hue: str = "strategy",
             theory: str = "theory", title: str | None = None, width: float = 6.0, height: float = 4.4):
    """ERSS-style G(k) curves: one panel per ``panel`` value; per ``hue`` group the empirical mean with its
    95% CI (error bars) and the theory (dashed); ``bounds`` (columns ``panel``, ``x``, ``lemma43_min`` and
    optionally ``lemma43_fixed``) adds the Lemma 4.3 upper bounds as black lines. Log-scale x."""
    fig = ci_lines(curves, x, hue=hue, col=panel, theory=theory, logx=True, xlabel="drafted tokens k",
                   ylabel="tokens per target call G", width=width, height=height, legend=False,
                   title=title or "empirical G(k) (points, 95% CI) and 0th-order theory (dashed)")
    names = _values(curves, panel)
    for ax, name in zip(fig.axes, names):
        if bounds is not None:
            b = bounds[bounds[panel] == name].sort_values(x)
            if "lemma43_min" in b:
                ax.plot(b[x], b["lemma43_min"], "k:", label="Lemma 4.3 bound (min over m)")
            if "lemma43_fixed" in b:
                ax.plot(b[x], b["lemma43_fixed"], "k-.", alpha=0.6, label="Lemma 4.3 bound (m fixed)")
        ax.legend(fontsize=7)
    return fig


def positional_law(laws: Mapping[str, Any], prefix: str = "p", max_index: int | None = None,
                   logy: bool = True, title: str | None = None, width: float = 6.0, height: float = 4.0):
    """The index distribution r(i) = P(the i-th drafted child is the accepted one) per method: the mean over
    the rows of each frame (columns ``p1``, ``p2``, ...) with ±1.96 standard errors. One line per method."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(width, height))
    for i, (name, law) in enumerate(laws.items()):
        columns = [c for c in law.columns if c.startswith(prefix) and c[len(prefix):].isdigit()]
        columns = sorted(columns, key=lambda c: int(c[len(prefix):]))[: max_index or None]
        idx = np.array([int(c[len(prefix):]) for c in columns])
        values = law[columns].to_numpy(dtype=float)
        mean = values.mean(0)
        se = values.std(0, ddof=1) / math.sqrt(len(values)) if len(values) > 1 else np.zeros_like(mean)
        half = Z95 * se
        below = half
        if logy:  # a log axis cannot show zero: drop zero means, keep lower whiskers above 10% of the mean
            keep = mean > 0
            idx, mean, half = idx[keep], mean[keep], half[keep]
            below = np.minimum(half, 0.9 * mean)
        ax.errorbar(idx, mean, yerr=np.vstack([below, half]), fmt="-o", color=f"C{i}", capsize=2, markersize=3,
                    label=f"{name} ({len(values)} stars)")
    if logy:
        ax.set_yscale("log")
    ax.set(xlabel="index i of the drafted child", ylabel="r(i)")
    ax.set_title(title or "index distribution r(i), mean ± 1.96 SE over stars"
                 + (" (log scale: lower whiskers cut at 10% of the mean)" if logy else ""), fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def forest(frame, label: str, x: str = "gain", lo: str | None = "ci_low", hi: str | None = "ci_high",
           col: str | None = None, percent: bool = True, linthresh: float | None = 10.0,
           xlabel: str | None = None, title: str | None = None, width: float = 5.5):
    """A forest plot: one row per value of ``label`` (in order of first appearance), the gain ``x`` with its CI
    as a horizontal bar (of zero length where the CI is NaN), a zero line, one panel per value of ``col`` sharing
    the rows.
    ``linthresh``: the x axis is linear within ±linthresh (percent when ``percent``) and logarithmic beyond it
    (None: linear), so gains of a few percent and of a few hundred percent read on one axis."""
    if label not in frame:
        raise ValueError(f"label: no column {label!r} in the frame")
    order = list(dict.fromkeys(frame[label].tolist()))
    if not order:
        raise ValueError("frame: no rows to plot")
    repeated = frame.duplicated([label] if col is None else [col, label])
    if repeated.any():
        raise ValueError(f"label: {sorted(set(frame.loc[repeated, label]))} appear more than once in a panel; "
                         "each row of the plot is one comparison")
    scale = 100.0 if percent else 1.0
    panels = _values(frame, col)
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), 0.3 * len(order) + 1.6), sharey=True,
                             squeeze=False)
    rows = np.arange(len(order))
    for ax, value in zip(axes[0], panels):
        part = frame if col is None else frame[frame[col] == value]
        part = part.set_index(label).reindex(order)
        gains = scale * part[x].to_numpy(dtype=float)
        ax.errorbar(gains, rows, xerr=_errors(part, gains, lo, hi, None, scale), fmt="o", color="C0", capsize=3,
                    markersize=4)
        ax.axvline(0, color="grey", lw=0.8)
        if linthresh is not None:
            ax.set_xscale("symlog", linthresh=linthresh)
        ax.set(yticks=rows, yticklabels=order, title=_label([(col, value)]) if col else None)
    axes[0][0].invert_yaxis()
    unit = "%" if percent else ""
    fig.supxlabel(xlabel or f"paired gain{', ' + unit if unit else ''}"
                  + (f" (log scale beyond ±{linthresh:g}{unit})" if linthresh is not None else ""), fontsize=10)
    fig.suptitle(title or "paired gains, 95% CI over prompts", fontsize=11)
    fig.tight_layout()
    return fig


def predicted_against_measured(check, margin: float = 0.20, choice: str | None = "optimizer's choice",
                               title: str | None = None, width: float = 5.0, height: float = 4.0):
    """Measured speedups against predicted ones, one point per tree (index of ``check``; columns predicted
    speedup, measured speedup, size, and CI low / CI high of measured / predicted - 1), each labelled with its
    size (``choice`` marked), the diagonal and the band of ±``margin`` around it."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(width, height))
    lows = check["predicted speedup"] * (1 + check["CI low"])
    highs = check["predicted speedup"] * (1 + check["CI high"])
    ax.errorbar(check["predicted speedup"], check["measured speedup"],
                yerr=[check["measured speedup"] - lows, highs - check["measured speedup"]], fmt="o", capsize=3)
    for name, r in check.iterrows():
        ax.annotate(f" n={int(r['size'])}" + (" (choice)" if name == choice else ""),
                    (r["predicted speedup"], r["measured speedup"]), fontsize=8)
    lim = [0, 1.1 * float(max(check["predicted speedup"].max(), highs.max(), 1.0))]
    ax.plot(lim, lim, "--", color="grey", lw=0.8, label="measured = predicted")
    ax.fill_between(lim, [(1 - margin) * x for x in lim], [(1 + margin) * x for x in lim], color="grey", alpha=0.12,
                    lw=0, label=f"±{100 * margin:.0f}% (the rule's margin)")
    ax.legend(loc="upper left", fontsize=8)
    ax.set(xlim=lim, ylim=lim, xlabel="predicted speedup (profile + acceptance vector)",
           ylabel="measured speedup (95% CI over prompts)", title=title)
    return fig


def errorbar_count(fig) -> int:
    """Number of error-bar lines (ErrorbarContainer) in a figure: one per plotted group."""
    # lazy: matplotlib is only needed when a figure is drawn
    from matplotlib.container import ErrorbarContainer

    return sum(isinstance(c, ErrorbarContainer) for ax in fig.axes for c in ax.containers)


__all__ = ["ci_lines", "gain_plot", "gain_with_theory", "ccdf", "compare_lines", "g_curves", "positional_law", "wilson_interval",
           "forest", "predicted_against_measured", "errorbar_count"]
