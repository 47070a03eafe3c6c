"""The ``rules`` subcommand: ``rules check`` (soundness and stability of rule files)
and ``rules list``."""

from __future__ import annotations

import argparse

from .cli_args import positive_int_arg, seed_arg
from .cli_common import (EXIT_OK, EXIT_VALIDATION_FAILED, add_backend_arg, chosen_backend,
                         print_json)


# ---------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------

def add_rules(sub) -> None:
    p = sub.add_parser("rules", help="check or list .bbr rule files")
    rsub = p.add_subparsers(dest="rules_command", metavar="ACTION", required=True)
    check = rsub.add_parser("check", help="parse, statically check and verify the soundness "
                                          "and numerical stability of every rule (exit 1 "
                                          "if one is unsound or unstable)")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--trials", type=positive_int_arg, default=None, metavar="INT",
                       help="random instances tried per rewrite rule for soundness "
                            "(default 30; stability always tries 27)")
    check.add_argument("--seed", type=seed_arg, default=0, metavar="INT")
    add_backend_arg(check, "the backend whose hardware the check programs are fused "
                           "for (actions are tried on their fusion states)")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(func=cmd_rules_check)
    lst = rsub.add_parser("list", help="list rules, their locations and phases")
    lst.add_argument("files", nargs="*", metavar="FILE",
                     help="rule files (default: the shipped default rule set)")
    lst.set_defaults(func=cmd_rules_list)


def cmd_rules_check(args: argparse.Namespace) -> int:
    from .dsl.loader import load_rules
    from .checks import DEFAULT_TRIALS
    from .rulecheck import check_rules
    trials = DEFAULT_TRIALS if args.trials is None else args.trials
    rules = load_rules(*args.files)
    backend = chosen_backend(args)
    findings = check_rules(rules, backend.hardware, trials=trials, seed=args.seed)
    unsound = [f for f in findings if f.failed]
    if args.json:
        print_json({"rules": [{"rule": f.rule, "location": f.location, "sound": f.sound,
                               "check": f.kind, "allowed": f.allowed,
                               "trials": f.trials, "detail": f.detail} for f in findings],
                    "unsound": len(unsound), "backend": backend.name,
                    "hardware": backend.hardware.as_dict()})
    else:
        print(f"fused for backend {backend.name}: {backend.hardware.summary()}")
        for f in findings:
            print(f)
        print(_summary(findings))
    return EXIT_VALIDATION_FAILED if unsound else EXIT_OK


def _summary(findings) -> str:
    """Per rule, not per check: ``3 rules: 2 ok, 1 unsound, 0 unstable``."""
    rules: dict[str, list] = {}
    for f in findings:
        rules.setdefault(f.location, []).append(f)
    unsound = sum(1 for fs in rules.values() if any(f.failed and f.kind == "soundness"
                                                    for f in fs))
    unstable = sum(1 for fs in rules.values() if any(f.failed and f.kind == "stability"
                                                     for f in fs)
                   and not any(f.failed and f.kind == "soundness" for f in fs))
    allowed = sum(1 for fs in rules.values() if any(f.allowed and not f.sound for f in fs)
                  and not any(f.failed for f in fs))
    idle = sum(1 for fs in rules.values() if all(f.unexercised for f in fs))
    ok = len(rules) - unsound - unstable - allowed - idle
    text = (f"{len(rules)} rule{'' if len(rules) == 1 else 's'}: {ok} ok, {unsound} unsound, "
            f"{unstable} unstable")
    return text + (f", {allowed} unstable but allowed (unsafe rule set)" if allowed else "") \
        + (f", {idle} not exercised" if idle else "")


def cmd_rules_list(args: argparse.Namespace) -> int:
    from .dsl.loader import default_rules, load_rules
    rules = load_rules(*args.files) if args.files else default_rules()
    phases_of: dict[str, list[str]] = {}
    for phase in rules.phases:
        for r in phase.rules:
            phases_of.setdefault(r, []).append(phase.name)
    for name, rule in rules.rules.items():
        print(f"{rule.loc}: {name}  [{', '.join(phases_of.get(name, ['(no phase)']))}]")
    print(f"schedule: {', '.join(rules.schedule)}")
    return EXIT_OK
