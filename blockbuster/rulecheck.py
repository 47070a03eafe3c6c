"""Checking rule files before they are trusted: the CLI's one door to the rule checkers.

``blockbuster rules check`` and ``blockbuster run --rules FILE`` reach the soundness
(and, once it lands there, stability) checker only through this module, so moving the
checker is a one-line import change. ``run --rules`` checks only the rules the user
wrote — the shipped rule sets are checked by the test suite — and caches the verdict
on disk, keyed by the content of every loaded rule file, the checker's own source and
the trial settings: a rule file is checked once, not on every run.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .cost.hardware import Hardware
from .dsl.ast import RuleDef, RuleSet
from .dsl.loader import shipped_rulesets_dir
from . import checks as _checks
from .checks import DEFAULT_TRIALS, Finding
from .checks import soundness as _soundness
from .checks import stability as _stability


def check_rules(rules: RuleSet, hardware: Hardware, trials: int = DEFAULT_TRIALS,
                seed: int = 0) -> list[Finding]:
    """Soundness and stability findings of every rule of ``rules`` (``rules check``);
    actions are checked on states fused for ``hardware``."""
    return _checks.check_rules(rules, trials=trials, seed=seed, hardware=hardware)


def user_rules(rules: RuleSet) -> list[RuleDef]:
    """The rules not defined in a shipped rule set."""
    shipped = shipped_rulesets_dir().resolve()
    return [r for r in rules.rules.values() if Path(r.loc.file).resolve().parent != shipped]


def cache_dir() -> Path:
    """``$BLOCKBUSTER_CACHE/rulecheck``, else ``~/.cache/blockbuster/rulecheck`` (the
    Numba plugin's cache root)."""
    root = os.environ.get("BLOCKBUSTER_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "blockbuster"
    return base / "rulecheck"


def _cache_key(rules: RuleSet, hardware: Hardware, trials: int, seed: int) -> str:
    h = hashlib.sha256()
    parts = [Path(m.__file__).read_bytes() for m in (_soundness, _stability)]
    parts.append(f"{trials}/{seed}/{hardware!r}".encode())
    parts += [Path(f).read_bytes() for f in sorted(set(rules.files)) if Path(f).is_file()]
    parts += [r.text.encode() for r in rules.rules.values()]   # rules loaded from text
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:32]


def check_user_rules(rules: RuleSet, hardware: Hardware, trials: int = DEFAULT_TRIALS,
                     seed: int = 0, directory: Path | None = None) -> tuple[list[dict], bool]:
    """Findings (as dicts: rule, location, kind, sound, failed, trials, detail, text) for
    the user's rules of ``rules``, soundness then stability, and whether they came
    from the cache. Actions are checked on states fused for ``hardware``."""
    path = (directory or cache_dir()) / f"{_cache_key(rules, hardware, trials, seed)}.json"
    try:
        return _relocated(json.loads(path.read_text()), rules), True
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    mine = user_rules(rules)
    found: list[Finding] = []
    states = None
    for rule in mine:
        if rule.kind == "action" and states is None:
            states = _soundness.action_states(_soundness.check_programs(seed), rules, seed,
                                              hardware=hardware)
        found.append(_soundness.check_rule(rule, trials, seed, None, rules, states,
                                           hardware=hardware))
    unsound = {f.rule for f in found if not f.sound}
    for rule in mine:       # stability is asked of sound rewrite rules only
        if rule.kind == "rewrite" and rule.name not in unsound:
            allowed = bool(_stability.unsafe_reason(rule.loc.file))
            found.append(_stability.check_rule_stability(rule, _stability.STABILITY_TRIALS,
                                                         seed, allowed))
    findings = [{"rule": f.rule, "location": f.location, "kind": f.kind,
                 "sound": bool(f.sound), "failed": bool(f.failed), "trials": f.trials,
                 "detail": f.detail, "text": str(f)} for f in found]
    try:                        # a cache that cannot be written only costs time
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(findings))
        tmp.replace(path)
    except OSError:
        pass
    return findings, False


def _relocated(findings: list[dict], rules: RuleSet) -> list[dict]:
    """Cached findings named with the files as this run loaded them: the cache is
    keyed by content, and the same rules may have been checked under another path
    (a copied file, another working directory)."""
    out = []
    for f in findings:
        rule = rules.rules.get(f["rule"])
        old = f["location"].rsplit(":", 2)[0]
        new = str(rule.loc).rsplit(":", 2)[0] if rule is not None else old
        out.append({k: v.replace(old, new) if isinstance(v, str) and old != new else v
                    for k, v in f.items()})
    return out


def require_trusted(rules: RuleSet, hardware: Hardware, where: str) -> None:
    """Raise :class:`~blockbuster.errors.UntrustedRulesError` if a rule of the user's own
    files in ``rules`` is unsound or unstable (checked once per file content: cached);
    ``where`` names the escape hatch (``trust_rules=True``) in the message."""
    if not user_rules(rules):
        return                          # the shipped rule sets: checked by the tests
    findings, _cached = check_user_rules(rules, hardware)
    failed = [f for f in findings if f["failed"]]
    if not failed:
        return
    from .errors import UntrustedRulesError
    what = failure_kinds(failed)
    first = failed[0]
    head = first["text"].splitlines()[0]
    why = next((line.strip() for line in first["detail"].splitlines()
                if line.strip() and not line.strip().startswith(("rule ", "^"))), "")
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    files = " ".join(sorted({f["location"].rsplit(":", 2)[0] for f in failed}))
    raise UntrustedRulesError(
        f"{what} rule{'s' if len(failed) > 1 else ''} not used: {head}"
        f"{' — ' + why if why else ''}{more}; `python -m blockbuster rules check {files}` "
        f"shows why; fix the rule, or pass {where} to use it anyway")


def failure_kinds(failed: list[dict]) -> str:
    """"unsound", "unstable" or "unsound or unstable": what the failed findings are."""
    return " or ".join(sorted({"unsound" if f["kind"] == "soundness" else "unstable"
                               for f in failed}))
