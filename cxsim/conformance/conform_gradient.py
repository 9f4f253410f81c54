"""``cxsim conform ESTIMATOR --gradient``: an estimator and a reduction together against the
true policy gradient of the lab's small process (docs/conformance.md, "The expected-gradient
check"), beside cxsim's own pair on the same batches.

The estimator is one of the trainer's registry (a name, an installed plug-in, or
``module:name`` of an ``Estimator``); the reduction a function in the ``loss-matrix`` layout
(``--reduction module:fn``) or, without one, cxsim's own for ``--mode``. cxsim's pair is the
estimator cxsim holds for the quantity (``--quantity``, or the estimator's own) and
``--mode``. The check fails when the cosine or the relative norm differs from that pair's by
more than the tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

from cxsim.lab.process import Critic, ProcessSpec

GRADIENT_SPEC = ProcessSpec(compactions=2, exec_tokens=(48,), summary_tokens=8, turn_tokens=16)
"""The lab's small process (its smoke preset): 2 compactions, 3 windows of 48 trainable tokens
in turns of 16, summaries of 8."""
GRADIENT_SETTINGS: tuple[tuple[str, Critic, str, float], ...] = (
    ("exact critic, lambda 1", Critic(), "fixed", 1.0),
    ("critic noise 0.1, adaptive lambda (rollout)", Critic(noise=0.1), "rollout", 1.0),
)
"""(title, critic, lambda mode, lambda) of each setting checked."""
ROLLOUTS = 2048
BATCH_ROLLOUTS = 64


@dataclass(frozen=True)
class GradientRequest:
    """What to check: the estimator, the reduction (None: cxsim's own) and the declared mode,
    against cxsim's estimator ``reference``."""

    estimator: str
    reduction: str | None
    mode: str
    reference: str
    tolerance: float = 0.02
    seed: int = 0


def _interval(figure: tuple[float, float, float]) -> str:
    return f"{figure[0]:.3f} [{figure[1]:.3f}, {figure[2]:.3f}]"


def check(request: GradientRequest) -> tuple[bool, str]:
    """(passed, report) of the expected-gradient check over :data:`GRADIENT_SETTINGS`."""
    from cxsim.conformance.check import load_function
    from cxsim.lab import measure
    from cxsim.lab.gradient import check_gradient, mode_weights, reduction_weights
    from cxsim.lab.process import simulate

    ours = mode_weights(request.mode)
    theirs = (
        ours
        if request.reduction is None
        else reduction_weights(load_function(request.reduction), request.mode)
    )
    reduction = request.reduction or f"cxsim's {request.mode}"
    lines = [
        f"expected-gradient check of {request.estimator} with {reduction} "
        f"(declared mode {request.mode}), against cxsim's {request.reference} with "
        f"{request.mode}",
        f"process: {GRADIENT_SPEC.compactions} compactions, windows of "
        f"{GRADIENT_SPEC.exec_lengths[0]} trainable tokens, summaries of "
        f"{GRADIENT_SPEC.summary_tokens}; {ROLLOUTS} rollouts per setting in batches of "
        f"{BATCH_ROLLOUTS}; 95% bootstrap intervals over the batches",
        "",
    ]
    failed = 0
    for i, (title, critic, lam_mode, lam) in enumerate(GRADIENT_SETTINGS):
        sample = simulate(GRADIENT_SPEC, ROLLOUTS, critic, request.seed + i)
        got = check_gradient(
            sample, measure.run(sample, request.estimator, lam, lam_mode), theirs, ours,
            BATCH_ROLLOUTS,
        )  # fmt: skip
        ref = check_gradient(
            sample, measure.run(sample, request.reference, lam, lam_mode), ours, ours,
            BATCH_ROLLOUTS,
        )  # fmt: skip
        cos_gap = abs(got.cosine[0] - ref.cosine[0])
        norm_gap = abs(got.rel_norm[0] - ref.rel_norm[0])
        ok = cos_gap <= request.tolerance and norm_gap <= request.tolerance
        failed += not ok
        lines += [
            f"  {'ok  ' if ok else 'FAIL'} {title}",
            f"       cosine to the true gradient  {_interval(got.cosine)}  "
            f"(cxsim {_interval(ref.cosine)})",
            f"       relative norm                {_interval(got.rel_norm)}  "
            f"(cxsim {_interval(ref.rel_norm)})",
            f"       mode cosine {got.mode_cosine:.3f} ({request.mode}'s own reweighting)",
        ]
        if not ok:
            lines.append("       " + _reading(cos_gap, norm_gap, got, ref, request.tolerance))
    count = len(GRADIENT_SETTINGS)
    lines.append("")
    if failed:
        lines.append(
            f"fails: the cosine or the relative norm lies more than {request.tolerance:g} from "
            f"cxsim's pair in {failed} of {count} settings"
        )
    else:
        lines.append(
            f"passes: cosine and relative norm within {request.tolerance:g} of cxsim's pair in "
            f"all {count} settings"
        )
    passed = failed == 0
    return passed, "\n".join(lines)


def _reading(cos_gap: float, norm_gap: float, got, ref, tolerance: float) -> str:
    """One line on what differs: the length only (a reduction's scale) or the direction."""
    if cos_gap <= tolerance:
        ratio = got.rel_norm[0] / ref.rel_norm[0] if ref.rel_norm[0] else float("nan")
        return (
            f"the direction agrees and the length is {ratio:.3f} of cxsim's: a reduction "
            "that divides by another count (e.g. every token instead of the trainable ones)"
        )
    return "the direction differs: the advantages or the weights between tokens differ"
