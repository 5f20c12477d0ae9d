"""Each figure's caption, assembled from what the figure drew (`mbc.paper.figures.drawn`).

A caption is the text of what every drawing of the figure shows (its panels, axes and
reference lines), then one sentence per optional element: said when the element is on the
page, and, where the figure was asked for it and could not draw it (all of it, or in one
panel or for one value), said absent with the reason the figure recorded (a fit with too few uncensored runs names them). An element the
figure neither drew nor was asked for goes unmentioned. The figure rule writes the caption
beside the PDF (`<name>.tex`, a `\\caption{...}` line) and the report inputs it, so the
words cannot drift from the drawing. LaTeX; the reasons are escaped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mbc.paper.config_sections import FigureEntry
from mbc.paper.figures.common import experiment_names
from mbc.paper.figures.drawn import Drawn
from mbc.paper.latex import escape_latex

# `{role:<role>}` in a caption: the experiments its config entry draws in that role
_ROLE = re.compile(r"\{role:(\w+)\}")


@dataclass(frozen=True)
class Part:
    """One optional element of a figure: what the caption says when it is drawn, and
    when it was asked for and not drawn (`{why}`: the figure's reasons, joined)."""

    element: str
    drawn: str
    absent: str = ""


@dataclass(frozen=True)
class Caption:
    text: str
    parts: tuple[Part, ...] = ()


_CENSORED = Part("censored", r"Hollow triangles: runs that never crossed, at their budget.")
_DIVERGED = Part("diverged", r"Crosses: diverged runs, at the step they were stopped.")
_FIT = Part(
    "fit",
    r"Dashed lines: the power-law fits of Table~\ref{tab:fits}.",
    r"No fitted line where too few runs crossed to fit one ({why}).",
)

CAPTIONS: dict[str, Caption] = {
    "loss_curves": Caption(
        r"Representative runs, one seed per $K$: (a) the candidate loss in units of $\log K$"
        r" against training step, with the plateau level and the threshold that defines"
        r" $\tau$ (dots: $\tau$); (b) the $z$-shuffle gap of the same runs.",
        (_CENSORED, _DIVERGED),
    ),
    "tau_vs_d": Caption(
        r"Waiting time $\tau$ against dataset size $D$ on our fixed evaluation.",
        (
            Part(
                "fit",
                r"Dashed line: the pooled power-law fit; censored runs enter it as censored.",
                r"No pooled fit is drawn: too few runs crossed ({why}).",
            ),
            Part(
                "author",
                r"Plus signs: the author's $\tau$, read on his evaluation of groups drawn"
                r" afresh at every evaluation.",
            ),
            Part(
                "author_fit",
                r"Its fit, the scorecard's, in the same colour.",
                r"The author's $\tau$ has no fit: too few runs crossed on it ({why}).",
            ),
            Part("inset", r"Inset: our $\tau$ against $K$ at each fixed $D$."),
            Part(
                "inset_fit",
                r"The inset's dashed lines: its power-law fit at each $D$.",
                r"The inset has no fitted line where too few runs crossed ({why}).",
            ),
            _CENSORED,
            _DIVERGED,
        ),
    ),
    "noise": Caption(
        r"Noise sweeps. Top, the author's statistics, which the learning-rate and batch rows"
        r" of the scorecard and H2 read: (a) the transition window (from the last evaluation"
        r" near $\log K$ to the first near zero) on his evaluation of freshly drawn groups,"
        r" against the learning rate; (b) his first-target $\tau$ (the first logged window"
        r" whose running mean of the training batches' first-target loss is below half of"
        r" $\log K$) against the batch size in steps and (c) in examples seen (batch"
        r" $\times$ $\tau$), one colour per $K$. Bottom, ours: (d--f) the candidate $\tau$"
        r" against the same.",
        (
            Part(
                "fit",
                r"Dashed lines: power-law fits, one per $K$ in the batch panels.",
                r"No fitted line where too few runs crossed ({why}).",
            ),
            Part(
                "windows_not_drawn",
                r"A window that never closed, or closed without a start, is not drawn (the"
                r" author's script drops such a run); panel (a) counts them.",
            ),
            _CENSORED,
            _DIVERGED,
        ),
    ),
    "collective": Caption(
        r"Per-group candidate accuracy of a fixed sample of groups. (a) Against step$/\tau$:"
        r" the fraction of groups solved (accuracy at least the solved threshold, solid) and"
        r" the mean group accuracy (dashed); the dotted vertical lines mark $\tau/2$ and"
        r" $\tau$. (b)--(e) The distribution of group accuracy at checkpoints up to $\tau$;"
        r" the dashed vertical line is the solved threshold.",
        (
            Part(
                "censored_named",
                r"Runs that never crossed have no $\tau$ to scale by: the legend names them.",
            ),
        ),
    ),
    "routing": Caption(
        r"Selector routing. (a) Each head's attention to the selector positions, from the"
        r" position that predicts the first target token, and (b) the loss increase when the"
        r" head is zero-ablated, both at the middle of the transition (the \emph{mid}"
        r" phase), averaged over the diagnosed runs; (c) per run, the onset of the"
        r" $z$-shuffle gap against the onset of the loss drop (below the dotted line:"
        r" $z$-usage leads).",
        (
            Part(
                "onset_not_reached",
                r"Hollow triangles in (c): an onset not reached within the budget, drawn at"
                r" the budget.",
            ),
        ),
    ),
    "hessian": Caption(
        r"Extreme Hessian eigenvalues of the training loss. (a) $\lambda_{\max}$ and"
        r" $|\lambda_{\min}|$ along training, against step$/\tau$ (dotted: $\tau$), with the"
        r" residual of each estimate as its error bar. (b) The anisotropy"
        r" $|\lambda_{\max}/\lambda_{\min}|$ on the plateau against $K$, by each estimator.",
        (
            Part(
                "not_converged",
                r"Hollow markers: estimates whose residual fails the convergence test.",
            ),
            Part(
                "fit",
                r"Dashed lines in (b): the fits of Table~\ref{tab:fits}.",
                r"Panel (b) has no fitted line where too few estimates converged ({why}).",
            ),
            Part(
                "censored_named",
                r"Runs that never crossed have no $\tau$ to scale by: the legend names them.",
            ),
        ),
    ),
    "init_scale": Caption(
        r"Initialisation scale ({role:sweep}). (a) $\tau$ against the standard deviation of every"
        r" weight matrix at fixed $K$ and $D$. (b) $\tau$ against $D$ under the author's init"
        r" and under the alternative.",
        (
            Part(
                "fit",
                r"Dashed lines: the power-law fit of each series.",
                r"No fitted line where too few runs crossed ({why}).",
            ),
            _CENSORED,
            _DIVERGED,
        ),
    ),
    "appendix_linear": Caption(
        r"Linear baseline: the candidate loss in units of $\log K$ of a linear network (a"
        r" product of weight matrices, no nonlinearity) on one-hot inputs, $z$ encoded by its"
        r" characters.",
        (
            Part("linear", r"Dashed: $B$ encoded by its characters."),
            Part("identity", r"Dash-dotted: $B$ encoded by its identity among the $B$ strings."),
            Part(
                "transformer",
                r"Solid: a transformer run of the same $K$ and $D$.",
                r"No transformer run is drawn beside them: {why}.",
            ),
            _CENSORED,
            _DIVERGED,
        ),
    ),
    "appendix_direction": Caption(
        r"Directional asymmetry: the task $(B, z) \to A$ against the reversed task"
        r" $(A, z) \to B$ at matched sizes, per $K$. (a) Our waiting time $\tau$ of the"
        r" candidate loss, at a constant learning rate; (b) the author's lag, the first logged"
        r" step whose running-mean first-target loss is below a tenth of its first logged"
        r" value, in his regime (warm-up and cosine decay, clipping), the statistic of the"
        r" direction row. Bars: the mean over uncensored seeds; points: the seeds.",
        (_CENSORED, _DIVERGED),
    ),
    "appendix_label_noise": Caption(
        r"Label noise: (a) against the label-noise probability, the waiting time $\tau$ of"
        r" the candidate loss, and the first crossing of half of $\log K$ by the first-target"
        r" loss on a clean-label evaluation (ours) and by its running mean in the training"
        r" log, against the corrupted labels (the author's statistic for H4); (b) the final"
        r" candidate accuracy of the same runs.",
        (_CENSORED, _DIVERGED),
    ),
    "appendix_sharing": Caption(
        r"Gradient cancellation, against the selector sharing factor (groups per selector"
        r" set), by sharing scheme. (a) The author's duration, the statistic of H1: from the"
        r" first evaluation below $\log K$ to the first below half a nat, on his evaluation of"
        r" freshly drawn groups, plus one, per run, with its mean over seeds (bars). (b) Our"
        r" waiting time $\tau$.",
        (
            Part(
                "beta",
                r"The legend of (a) gives the exponent $\beta$ of the mean against the sharing"
                r" factor, fitted over factors above one as the author fitted it.",
                r"Panel (a) gives no exponent $\beta$: {why}.",
            ),
            Part(
                "fit",
                r"Dashed line in (b): its power-law fit.",
                r"Panel (b) has no fitted line: too few runs crossed ({why}).",
            ),
            _CENSORED,
            _DIVERGED,
        ),
    ),
    "appendix_threshold": Caption(
        r"Threshold robustness: the exponent of $\tau$ against $D$ (the $D$-law runs pooled)"
        r" re-fitted with $\tau$ read at several thresholds of the candidate loss, on our"
        r" evaluation of fixed contexts (circles) and on the author's, of groups drawn afresh"
        r" at each evaluation (squares), each with its bootstrap CI.",
        (
            Part("threshold_censored", r"``cens.'' counts the runs censored at that threshold."),
            Part(
                "no_fit_at_threshold",
                r"``fit n/a'' marks a threshold where neither series had enough runs to fit.",
            ),
            Part(
                "series_na",
                r"``n/a'' in one series' colour marks a threshold where that series alone had"
                r" too few.",
            ),
            Part(
                "series_unmeasured",
                r"A series the legend calls not measured has no run with that evaluation.",
            ),
        ),
    ),
    "appendix_plateau": Caption(
        r"Plateau height robustness: height / $\log K$ of each run of the $D$-law experiments,"
        r" with the plateau"
        r" window ended by the z-usage onset at several thresholds of the z-shuffle gap, or by"
        r" the loss onset alone. The run summaries use the window marked ``used''; the count"
        r" above each column is the number of runs inside the band.",
    ),
}


def caption_text(name: str, drawn: Drawn, entry: FigureEntry | None = None) -> str:
    """The caption of figure `name` for what it drew (LaTeX, without `\\caption`), its
    roles' experiments named as `entry` (its config `figures` entry) gives them."""
    cap = CAPTIONS[name]
    said = [
        _ROLE.sub(lambda m: escape_latex(experiment_names(entry.experiments_of(m[1]))), cap.text)
        if entry is not None
        else cap.text
    ]
    for part in cap.parts:
        if drawn.has(part.element):
            said.append(part.drawn)
        # asked for and not drawn, here or in another panel (one fit per K: some may fail)
        if part.absent and (why := drawn.why_absent(part.element)):
            said.append(part.absent.format(why=escape_latex("; ".join(why))))
    return " ".join(said)


def caption_tex(name: str, drawn: Drawn, entry: FigureEntry) -> str:
    """The `\\caption{...}` line the report inputs for figure `name`."""
    return f"\\caption{{{caption_text(name, drawn, entry)}}}\n"
