"""Build the shipped default model: ``make model`` runs ``python -m gpuwarden.models.make_default``.

1. simulate the training fleets: the default simulator's (``simdata.fleet_spec()``: 1,024
   GPUs, 97 days, seed 1) and members ``sim.family.TRAIN_SEEDS`` of the randomized family,
   as long, smaller; every third of those restricted to ``LINK_KINDS``: link and cooling
   failures with precursors and the sudden kinds other than HBM (the calibrated mix gives
   NVLink 2% and cooling 5% of the failures with precursors); ``--lookalike-fleets N`` adds
   the next N members with look-alikes and benign noise at the top of their ranges (an
   experiment of wave 12, not in the shipped model); ``--unread-hbm-fleets N`` the next N,
   link-focused with the HBM temperature hidden on every GPU model, so that the trees learn
   cooling failures on boards that report only the core's (experiment R of wave 12, shipped
   and withdrawn in wave 13: ``bench/bench_thermal_noise.py``); ``--unread-hbm-as-drawn N``
   the next N as drawn with it hidden (experiment R2 of wave 13);
2. train and calibrate on them side by side (``train.train_on_panel``, default options;
   ``--scale-free`` keeps ``features.ABSOLUTE_FEATURES`` out of the trees);
3. evaluate on the validation fleets, which it never saw: the default simulator's
   (``simdata.held_out_spec``: seed 2, scored hourly from 200 days later for 60 days, after a
   week of history) and family members ``sim.family.VALIDATION_SEEDS`` (as drawn and
   link-focused, an eighth as many nodes, the same days), and choose the threshold from their
   operating curves (``choose_threshold``);
4. evaluate at that threshold on it and on family member ``HELD_OUT_SEEDS[0]`` and put the
   figures in the model card (``bench/bench_model.py`` judges it on seeds 3 and 4 and all
   of ``HELD_OUT_SEEDS``, which chose nothing);
5. write ``gpuwarden/models/default/`` (model.skops, model_card.json).

``--random-state N`` draws the same recipe again (0 builds the shipped model); ``--draws K``
grows the trees K times on the same rows, each with its own draw of the negatives kept and of
early stopping's split, and scores the mean of their log-odds (``estimator.MeanOfDraws``;
candidate E of wave 30); ``--hide-per-draw`` builds the training rows once per draw, each draw
hiding the HBM temperature of its own nodes (candidate F of wave 31); ``--default-weight W``
weighs the default simulator's training rows W times in the trees (``TrainOptions.fleet_weights``:
with ``--family-fleets 48``, W = 2 keeps the share it has beside 24 members; wave 32);
``--mode-classes`` has the trees learn which failure mode a row precedes, scored as any failure
(``TrainOptions.mode_classes``, ``estimator.AnyFailure``; candidate M of wave 33).

``--line-step S`` reads the validation curves every S between 0.30 and 0.80 when choosing the
line (``line_grid``; 0.05, the curve's own grid, by default).

``--trained DIR`` reuses the trees and calibration of a model this command trained before
(steps 1-2 are deterministic: the same seeds give the same model) and redoes steps 3-5.

Everything is a function of the seeds, so the same command rebuilds the same model.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from gpuwarden.models.artifact import DEFAULT_DIR, RiskModel, load_model, save_model
from gpuwarden.models.evaluate import (
    CURVE_THRESHOLDS,
    Evaluation,
    evaluate_dataset,
    failures_of,
)
from gpuwarden.models.features import ABSOLUTE_FEATURES
from gpuwarden.models.labels import build_dataset, scoring_indices
from gpuwarden.models.panel import HourlyPanel
from gpuwarden.models.simdata import (
    SimPanel,
    concat_panels,
    family_panel,
    fleet_spec,
    held_out_spec,
    simulate_panel,
)
from gpuwarden.models.train import TrainOptions, train_on_panel
from gpuwarden.sim.family import VALIDATION_SEEDS, FamilyDraw

#: False flags per 1,000 GPU-days (30-day outcome) the default validation fleet may show at
#: the chosen threshold: half the target of 1, as the fleets the model is judged on differ.
VALIDATION_BUDGET = 0.5
#: ... and the family's validation fleets, pooled: the target itself, as the family is the
#: wider of the two generators.
FAMILY_BUDGET = 1.0
#: failure kinds of the link-and-cooling family fleets (with the sudden ones, as in a fleet).
#: No HBM kind: naming ``hbm_uncorrectable`` allows the HBM draw (``sim/_life.py``), which
#: then takes the HBM share of the mix, so such a fleet held no more link failures than one
#: as drawn.
LINK_KINDS = (
    "pcie_degradation",
    "nvlink_degradation",
    "cooling_degradation",
    "gsp_error",
    "sram_uncorrectable",
    "fell_off_bus",
    "silent_fault",
)


def link_focused(draw: FamilyDraw) -> FamilyDraw:
    """The member with only ``LINK_KINDS`` failing, every other parameter as drawn."""
    return replace(draw, spec=replace(draw.spec, kinds=LINK_KINDS))


def lookalike_focused(draw: FamilyDraw) -> FamilyDraw:
    """The member with its look-alike share and benign noise at the top of the family's
    committed ranges: more boards that look like failing ones and never fail (hard negatives),
    every other parameter as drawn."""
    from gpuwarden.sim.family import LOOKALIKE_RANGE, NOISE_RANGE

    spec = replace(
        draw.spec,
        lookalike_fraction=LOOKALIKE_RANGE[1],
        background_noise=NOISE_RANGE[1],
        pcie_noise=1.0,
    )
    return replace(draw, spec=spec)


def unread_hbm_focused(draw: FamilyDraw, *, links_only: bool = True) -> FamilyDraw:
    """The member with ``mem_temp_c`` the one field hidden, on every GPU model, and, by
    default, link-focused (``LINK_KINDS``): cooling failures seen through the core's
    temperature and power alone. The family hides each field on each model with probability
    0.2, so as drawn few training boards fail from cooling without their HBM temperature
    (wave 12: the model of wave 11 caught 13 of 44 such failures on members 6001-6004).
    ``links_only=False`` keeps the member's failure kinds as drawn."""
    hidden = tuple((m, ("mem_temp_c",)) for m in draw.spec.models)
    return replace(link_focused(draw) if links_only else draw, hidden=hidden)


def training_fleets(
    nodes: int,
    days: float,
    family_nodes: int,
    n_family: int,
    *,
    progress: bool,
    n_lookalike: int = 0,
    n_unread_hbm: int = 0,
    n_unread_hbm_drawn: int = 0,
) -> tuple[HourlyPanel, dict[str, Any], int]:
    """The default fleet, ``n_family`` family members, then ``n_lookalike`` look-alike-focused
    ones, ``n_unread_hbm`` link-focused ones without HBM temperature and
    ``n_unread_hbm_drawn`` as drawn without it (the next seeds) side by side: (panel, card
    source, failures)."""
    from tqdm import tqdm

    from gpuwarden.sim.family import TRAIN_SEEDS, draw_family

    n_members = n_family + n_lookalike + n_unread_hbm + n_unread_hbm_drawn
    if n_members > len(TRAIN_SEEDS):
        raise SystemExit(
            "--family-fleets + --lookalike-fleets + --unread-hbm-fleets + "
            f"--unread-hbm-as-drawn: at most {len(TRAIN_SEEDS)}"
        )
    first_unread = n_family + n_lookalike
    spec = fleet_spec(nodes=nodes, days=days, seed=1)
    panels: list[HourlyPanel] = []
    names: list[str] = []
    members: list[dict[str, Any]] = []
    n_fail = 0
    bar = tqdm(total=1 + n_members, desc="training fleets", unit="fleet", disable=not progress)
    sim: SimPanel = simulate_panel(spec)
    panels.append(sim.panel)
    names.append("default")
    n_fail += len(sim.failures)
    bar.update()
    for i, seed in enumerate(TRAIN_SEEDS[:n_members]):
        draw = draw_family(seed, nodes=family_nodes, days=days, start_ts=spec.start_ts)
        if i >= first_unread:
            draw = unread_hbm_focused(draw, links_only=i < first_unread + n_unread_hbm)
        elif i >= n_family:
            draw = lookalike_focused(draw)
        elif i % 3 == 2:
            draw = link_focused(draw)
        fam = family_panel(draw)
        panels.append(fam.panel)
        names.append(f"family{seed}")
        n_fail += len(fam.failures)
        members.append(
            {
                **draw.describe(),
                "kinds": list(draw.spec.kinds),
                "nodes": family_nodes,
                "lookalike_focused": n_family <= i < first_unread,
                "unread_hbm": i >= first_unread,
            }
        )
        bar.update()
    bar.close()
    source = {
        "simulator": {
            "nodes": nodes,
            "gpus_per_node": 8,
            "days": days,
            "seed": 1,
            "accel": spec.accel,
            "step_s": spec.step_s,
            "models": list(spec.models),
        },
        "family": members,
    }
    return concat_panels(panels, names), source, n_fail


def pooled_curve(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Several fleets' operating curves (``gpuwarden evaluate``'s summaries) as one: per
    threshold, the catchable failures caught >= 24 h ahead out of all catchable, and the false
    flags per 1,000 GPU-days (30-day outcome) over all their GPU-days."""
    out = []
    for i, point in enumerate(summaries[0]["operating_curve"]):
        catchable = caught = 0
        flagged = days = 0.0
        for s in summaries:
            c = s["operating_curve"][i]
            if c["threshold"] != point["threshold"]:
                raise ValueError("operating curves at different thresholds")
            n = int((s.get("catchable_by_mode") or {}).get("ALL with precursors", (0, 0))[0])
            catchable += n
            caught += round(c["catchable_share"] * n) if n else 0
            d = float(s.get("false_flag_gpu_days_30d") or 0.0)
            if d and np.isfinite(c["false_flags_per_1000"]):
                flagged += c["false_flags_per_1000"] * d / 1000
                days += d
        out.append(
            {
                "threshold": point["threshold"],
                "catchable": catchable,
                "caught": caught,
                "false_flags_per_1000": flagged / days * 1000 if days else float("nan"),
            }
        )
    return out


def pick_threshold(default: list[dict[str, Any]], family: list[dict[str, Any]]) -> float:
    """``choose_threshold``'s rule on two pooled curves at the same thresholds (each point:
    ``threshold``, ``caught``, ``false_flags_per_1000``)."""
    if [d["threshold"] for d in default] != [f["threshold"] for f in family]:
        raise ValueError("operating curves at different thresholds")
    ok = [
        (d["caught"] + f["caught"], d["threshold"])
        for d, f in zip(default, family, strict=True)
        if d["false_flags_per_1000"] <= VALIDATION_BUDGET
        and f["false_flags_per_1000"] <= FAMILY_BUDGET
    ]
    return float(max(ok)[1] if ok else max(c["threshold"] for c in default))


def choose_threshold(default: dict[str, Any], family: list[dict[str, Any]]) -> dict[str, Any]:
    """The threshold from the validation fleets' operating curves (``gpuwarden evaluate``'s
    summaries): the default simulator's (seed 2) and the family's ``VALIDATION_SEEDS``.

    Among the thresholds whose false flags (30-day outcome) stay within ``VALIDATION_BUDGET``
    per 1,000 GPU-days on the default fleet and within ``FAMILY_BUDGET`` pooled over the
    family's, the one that catches the most catchable failures >= 24 h ahead over all of them;
    on a tie, the higher. None within budget: the highest. The fleets the model is judged on
    are never used."""
    if not family:
        raise ValueError("no family validation fleet")
    d_curve, f_curve = pooled_curve([default]), pooled_curve(family)
    chosen = pick_threshold(d_curve, f_curve)
    return {
        "threshold": float(chosen),
        "rule": f"the most catchable failures caught >= 24 h ahead over the validation fleets "
        f"(default simulator, seed 2; family members {', '.join(map(str, VALIDATION_SEEDS))}, "
        f"as drawn and link-focused) with <= {VALIDATION_BUDGET:g} false flags per 1,000 "
        f"GPU-days (30-day outcome) on the default one and <= {FAMILY_BUDGET:g} on the "
        "family's, pooled",
        "curve": d_curve,
        "family_curve": f_curve,
    }


def family_variants(
    seeds: tuple[int, ...],
    nodes: int,
    days: float,
    start_ts: float,
    *,
    thermal_drift: bool = True,
    wide_noise: bool = True,
) -> list[tuple[str, Any]]:
    """Each family member as drawn and link-focused (``LINK_KINDS``): (label, draw), label
    ``"<seed> as drawn"`` or ``"<seed> link-focused"``. ``days`` includes the history;
    ``thermal_drift=False`` draws the members as before wave 14, ``wide_noise=False`` their
    benign noise as before wave 24 (``sim.family.draw_family``)."""
    from gpuwarden.sim.family import draw_family

    out = []
    for seed in seeds:
        draw = draw_family(
            seed,
            nodes=nodes,
            days=days,
            start_ts=start_ts,
            thermal_drift=thermal_drift,
            wide_noise=wide_noise,
        )
        out += [
            (f"{seed} as drawn", draw),
            (f"{seed} link-focused", link_focused(draw)),
        ]
    return out


def held_out(
    model: RiskModel,
    sim: SimPanel,
    first: float,
    curve_thresholds: tuple[float, ...] = CURVE_THRESHOLDS,
) -> tuple[Evaluation, Any]:
    ds = build_dataset(
        sim.panel,
        scoring_indices(sim.panel, step_h=1, start=first),
        horizon_s=model.horizon_s,
        drop_unknown=False,
    )
    fails = failures_of(sim.panel)
    ev = evaluate_dataset(
        ds, fails, model, horizon_s=model.horizon_s, curve_thresholds=curve_thresholds
    )
    return ev, (ds, fails)


#: where ``--line-step`` reads the validation curves more finely: the lines every model so
#: far chose from (0.50-0.60), with room either side
FINE_LINES = (0.30, 0.80)


def line_grid(step: float) -> tuple[float, ...]:
    """The lines the chooser reads: ``CURVE_THRESHOLDS`` (steps of 0.05) and, for a smaller
    ``step``, every ``step`` within ``FINE_LINES``."""
    if not 0 < step <= 0.05:
        raise ValueError(f"the line step must be in (0, 0.05], got {step!r}")
    if step == 0.05:
        return CURVE_THRESHOLDS
    lo, hi = FINE_LINES
    fine = np.round(np.arange(lo, hi + step / 2, step), 4)
    return tuple(sorted({*CURVE_THRESHOLDS, *map(float, fine)}))


def _card_metrics(ev: Evaluation, fleet: dict[str, Any]) -> dict[str, Any]:
    return {
        "fleet": fleet,
        "per_mode": ev.table.to_dict(orient="records"),
        **ev.summary,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_DIR, help="model folder to write")
    ap.add_argument("--nodes", type=int, default=128, help="nodes (x8 GPUs) in each fleet")
    ap.add_argument("--days", type=float, default=97.0, help="days of training history")
    ap.add_argument(
        "--eval-days",
        type=float,
        default=60.0,
        help="days of held-out history (the last 30 only count towards the 30-day false flags)",
    )
    ap.add_argument("--family-fleets", type=int, default=24, help="family members to train on")
    ap.add_argument("--family-nodes", type=int, default=8, help="nodes in each family fleet")
    ap.add_argument(
        "--lookalike-fleets",
        type=int,
        default=0,
        help="further family members with look-alikes and benign noise at the top of their ranges",
    )
    ap.add_argument(
        "--unread-hbm-fleets",
        type=int,
        default=0,
        help="further link-focused family members with the HBM temperature hidden on every model",
    )
    ap.add_argument(
        "--unread-hbm-as-drawn",
        type=int,
        default=0,
        help="further family members, as drawn, with the HBM temperature hidden on every model",
    )
    ap.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=sys.stderr.isatty(),
        help="progress bars on stderr (default: when stderr is a terminal)",
    )
    ap.add_argument("--trained", type=Path, default=None, help="reuse this model's trees")
    ap.add_argument(
        "--scale-free",
        action="store_true",
        help="trees without features.ABSOLUTE_FEATURES (error rates in the simulator's units)",
    )
    ap.add_argument(
        "--random-state",
        type=int,
        default=0,
        help="training's random seed (hidden HBM temperatures, negatives kept, early stopping's "
        "split); 0 builds the shipped model, another draws the same recipe again",
    )
    ap.add_argument(
        "--draws",
        type=int,
        default=1,
        help="tree models to grow on the training rows, each with its own draw of the negatives "
        "kept and of early stopping's split, scored as the mean of their log-odds (1: shipped)",
    )
    ap.add_argument(
        "--hide-per-draw",
        action="store_true",
        help="with --draws: each draw hides the HBM temperature of its own share of the nodes "
        "(the training rows built once per draw)",
    )
    ap.add_argument(
        "--line-step",
        type=float,
        default=0.05,
        help="read the validation curves every this much between 0.30 and 0.80 when choosing "
        "the line (0.05: the shipped grid)",
    )
    ap.add_argument(
        "--default-weight",
        type=float,
        default=1.0,
        help="the default simulator's training rows weigh this much in the trees (1: shipped; "
        "e.g. 2 with --family-fleets 48 keeps its share of a 24-member training)",
    )
    ap.add_argument(
        "--mode-classes",
        action="store_true",
        help="the trees learn which failure mode a row precedes, scored as any failure "
        "(TrainOptions.mode_classes; off: shipped)",
    )
    ap.add_argument(
        "--early-stop-lives",
        action="store_true",
        help="early stopping holds out whole GPU lives, not single rows "
        "(TrainOptions.early_stop_lives; off: shipped)",
    )
    ap.add_argument(
        "--max-features",
        type=float,
        default=1.0,
        help="share of the features each split chooses from, drawn at each split "
        "(TrainOptions.max_features; 1: shipped)",
    )
    ap.add_argument(
        "--learnable-only",
        action="store_true",
        help="the trees learn failing rows only from their precursor's start on, and no sudden "
        "failure's rows (TrainOptions.learnable_only; off: shipped)",
    )
    ap.add_argument(
        "--learnable-healthy",
        action="store_true",
        help="the trees also skip the healthy-labelled rows of a precursor under way, more than "
        "the horizon before its failure (TrainOptions.learnable_healthy; off: shipped)",
    )
    ap.add_argument(
        "--monotone",
        action="store_true",
        help="the trees' score never falls as a feature of features.MONOTONE_FEATURES rises "
        "(TrainOptions.monotone; off: shipped)",
    )
    args = ap.parse_args(argv)
    if not 0 < args.max_features <= 1:
        ap.error("--max-features must be in (0, 1]")
    if not (np.isfinite(args.default_weight) and args.default_weight > 0):
        ap.error("--default-weight must be a positive number")
    try:
        grid = line_grid(args.line_step)
    except ValueError as exc:
        ap.error(str(exc))
    if args.draws < 1:
        ap.error("--draws must be at least 1")
    if args.hide_per_draw and args.draws < 2:
        ap.error("--hide-per-draw needs --draws 2 or more")
    t0 = time.time()
    if args.trained is not None:
        model = load_model(args.trained)
        model.card["metrics"] = {"calibration_block": model.card["metrics"]["calibration_block"]}
        print(f"reusing the trees of {args.trained}", flush=True)
    else:
        panel, source, n_fail = training_fleets(
            args.nodes,
            args.days,
            args.family_nodes,
            args.family_fleets,
            progress=args.progress,
            n_lookalike=args.lookalike_fleets,
            n_unread_hbm=args.unread_hbm_fleets,
            n_unread_hbm_drawn=args.unread_hbm_as_drawn,
        )
        print(
            f"simulated {1 + len(source['family'])} training fleets: {panel.shape[1]} GPU lives, "
            f"{n_fail} failures ({time.time() - t0:.0f} s)",
            flush=True,
        )
        options = TrainOptions(
            exclude_features=ABSOLUTE_FEATURES if args.scale_free else (),
            random_state=args.random_state,
            draws=args.draws,
            hide_per_draw=args.hide_per_draw,
            fleet_weights=(("default", args.default_weight),) if args.default_weight != 1 else (),
            mode_classes=args.mode_classes,
            early_stop_lives=args.early_stop_lives,
            max_features=args.max_features,
            learnable_only=args.learnable_only,
            learnable_healthy=args.learnable_healthy,
            monotone=args.monotone,
        )
        model = train_on_panel(panel, options=options, source=source, progress=args.progress)
        del panel
        print(
            f"trained ({model.card['train_seconds']:.0f} s, {model.card['tree_rounds']} rounds)",
            flush=True,
        )
    from tqdm import tqdm

    from gpuwarden.sim.family import HELD_OUT_SEEDS, draw_family

    held, first = held_out_spec(nodes=args.nodes, days=args.eval_days)
    ev, (ds, fails) = held_out(model, simulate_panel(held, progress=args.progress), first, grid)
    variants = family_variants(
        VALIDATION_SEEDS, max(1, args.nodes // 8), args.eval_days + 7, held.start_ts
    )
    family = [
        held_out(model, family_panel(d), first, grid)[0].summary
        for _, d in tqdm(
            variants,
            desc="validation family",
            unit="fleet",
            disable=not args.progress,
        )
    ]
    choice = choose_threshold(ev.summary, family)
    choice["line_step"] = args.line_step
    model.card["threshold"] = choice["threshold"]
    model.card["threshold_choice"] = choice
    print(f"threshold {choice['threshold']:g}: {choice['rule']}", flush=True)
    ev = evaluate_dataset(ds, fails, model, horizon_s=model.horizon_s)
    del ds
    model.card["metrics"]["validation"] = _card_metrics(
        ev,
        {
            "nodes": args.nodes,
            "days": args.eval_days,
            "seed": 2,
            "history_from_ts": held.start_ts,
            "scored_from_ts": first,
        },
    )
    print(ev.render(), flush=True)
    draw = draw_family(
        HELD_OUT_SEEDS[0], nodes=args.nodes // 2, days=args.eval_days + 7, start_ts=held.start_ts
    )
    ev_f, _ = held_out(model, family_panel(draw, progress=args.progress), first)
    model.card["metrics"]["held_out_family"] = _card_metrics(
        ev_f, {**draw.describe(), "nodes": args.nodes // 2, "scored_from_ts": first}
    )
    print(ev_f.render(), flush=True)
    folder = save_model(model, args.out)
    print(f"wrote {folder} ({time.time() - t0:.0f} s in all)")


if __name__ == "__main__":
    main()
