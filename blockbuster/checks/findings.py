"""What a rule check reports: one :class:`Finding` per rule and check, with the
rule's source line and a caret under it when the file can be read."""

from __future__ import annotations

from pathlib import Path

import attrs

from ..dsl.ast import RuleDef


@attrs.frozen
class Finding:
    """``sound`` is False when the rule failed the check (``kind`` says which:
    "soundness" or "stability"). ``allowed`` marks a stability finding in a rule set
    declared unsafe: reported, but it does not fail the check."""

    rule: str
    location: str
    sound: bool
    trials: int
    detail: str = ""
    kind: str = "soundness"
    allowed: bool = False

    @property
    def failed(self) -> bool:
        return not self.sound and not self.allowed

    @property
    def unexercised(self) -> bool:
        """Passed without a single trial: no sampled state or instance took the rule
        (nothing was checked, so it is said so rather than "ok")."""
        return self.sound and self.trials == 0

    def __str__(self) -> str:
        if self.unexercised:
            verdict = "not exercised: no sampled instance or fusion state took it"
        elif self.sound:
            verdict = "ok" if self.kind == "soundness" else "stable"
        elif self.kind == "stability":
            verdict = "unstable (allowed: unsafe rule set)" if self.allowed else "UNSTABLE"
        else:
            verdict = "UNSOUND"
        text = f"{self.location}: {self.rule}: {verdict} ({self.trials} trials)"
        if self.sound or not self.detail:
            return text
        return text + "\n" + "\n".join("    " + line for line in self.detail.splitlines())


def source_excerpt(rule: RuleDef) -> str:
    """The rule's first source line with a caret under its name ("" if unreadable)."""
    line = ""
    try:
        path = Path(rule.loc.file)
        if path.is_file():
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            if 0 < rule.loc.line <= len(lines):
                line = lines[rule.loc.line - 1]
    except OSError:
        line = ""
    if not line:
        first = rule.text.splitlines()[0] if rule.text else ""
        line = first
        column = first.find(rule.name) + 1 if rule.name in first else 1
    else:
        column = rule.loc.column
    if not line:
        return ""
    return f"{line}\n{' ' * max(column - 1, 0)}^"


def finding(rule: RuleDef, sound: bool, trials: int, detail: str = "",
            kind: str = "soundness", allowed: bool = False) -> Finding:
    if not sound and detail:
        excerpt = source_excerpt(rule)
        if excerpt:
            detail = f"{excerpt}\n{detail}"
    return Finding(rule.name, str(rule.loc), sound, trials, detail, kind, allowed)
