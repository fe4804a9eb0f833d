"""What the 95 % intervals cost an agreement group: the judge-human figures of one group
(``scoring.insights.agreement``: four figures, a session's pairs resampled together) and
the figures against Go TARSy's reviewers (``scoring.insights.tarsy_agreement``: ρ, AUC,
band share), for groups of --sizes sessions (one reviewer each, generated with a fixed
seed), beside the same figures computed once without intervals, in the same run. "with
intervals" is a first request (the remembered intervals cleared before each run);
"remembered" is the next one for the same reviews (``confidence.cached_intervals``). No
database: the figures are computed from pairs in memory, as the selectors do after their
one query. Each case runs --runs times after a warm-up; the median and the range are printed
in milliseconds.

    .venv/bin/python bench/bench_confidence.py                   # about a minute
    .venv/bin/python bench/bench_confidence.py --sizes 20 100 --runs 3     # quick
"""

import argparse
import random
import uuid

from common import machine_description, run_times_ms, setup_django, spread, sqlite_url, work_folder


def judge_human_pairs(sessions: int, generator: random.Random) -> list[dict]:
    pairs = []
    for _ in range(sessions):
        total = generator.randint(0, 100)
        reviewer_score = max(0, min(100, total + generator.randint(-25, 25)))
        pairs.append({
            "session_id": uuid.uuid4(), "score_id": uuid.uuid4(), "total_score": total,
            "reviewer_score": reviewer_score, "verdict": generator.choice(["agree", "disagree"]),
        })  # fmt: skip
    return pairs


def tarsy_pairs(sessions: int, generator: random.Random) -> list[tuple[int, str]]:
    ratings = ["inaccurate", "partially_accurate", "accurate"]
    return [(generator.randint(0, 100), generator.choice(ratings)) for _ in range(sessions)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 100, 500, 2000])
    parser.add_argument("--runs", type=int, default=5)
    arguments = parser.parse_args()
    with work_folder() as folder:
        setup_django(sqlite_url(folder))
        from scoring.insights import agreement, confidence, tarsy_agreement

        def cold(run):
            def cleared():
                confidence.cached_intervals.cache_clear()
                run()

            return cleared

        print(machine_description())
        print("| sessions | judge-human: figures only | with intervals | ratio | remembered | "
              "TARSy's reviewers: figures only | with intervals | ratio | remembered |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|")
        generator = random.Random(32)
        for size in arguments.sizes:
            pairs = judge_human_pairs(size, generator)
            ratings = tarsy_pairs(size, generator)
            reviews = [(pair["total_score"], pair["reviewer_score"], pair["verdict"] == "agree") for pair in pairs]
            human_once = run_times_ms(lambda: [figure(reviews) for figure in agreement.FIGURES.values()], arguments.runs)
            human = run_times_ms(cold(lambda: agreement._group_figures({}, pairs)), arguments.runs)
            human_warm = run_times_ms(lambda: agreement._group_figures({}, pairs), arguments.runs)
            tarsy_once = run_times_ms(
                lambda: (
                    tarsy_agreement._reviewers_rho(ratings),
                    tarsy_agreement._auc_of_pairs(ratings),
                    tarsy_agreement._mapping_agree_share(ratings),
                ),
                arguments.runs,
            )
            tarsy = run_times_ms(cold(lambda: tarsy_agreement._reviewers_group({}, ratings)), arguments.runs)
            tarsy_warm = run_times_ms(lambda: tarsy_agreement._reviewers_group({}, ratings), arguments.runs)
            ratio = sorted(human)[len(human) // 2] / sorted(human_once)[len(human_once) // 2]
            tarsy_ratio = sorted(tarsy)[len(tarsy) // 2] / sorted(tarsy_once)[len(tarsy_once) // 2]
            print(
                f"| {size} | {spread(human_once, 2)} | {spread(human)} | {ratio:.0f}× | {spread(human_warm, 2)} "
                f"| {spread(tarsy_once, 2)} | {spread(tarsy)} | {tarsy_ratio:.0f}× | {spread(tarsy_warm, 2)} |"
            )


if __name__ == "__main__":
    main()
