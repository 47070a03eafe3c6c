"""Reading .bbr rule files: parsing, includes, and the static checks.

Every mistake is a :class:`SourceError` located at ``FILE:LINE:COL``: syntax errors,
unknown operators, combiners, guards or actions, wrong argument counts, a
right-hand side using a variable its pattern does not bind, a name used as two kinds
of thing (a range or loop variable used as a value), ``runmax(k)`` outside a binder
over ``k``, duplicate rule or phase names, a phase naming an unknown rule, a rule in
no phase (when the files declare phases), a schedule naming an unknown phase, a
missing included file, a file that is not text, terms nested too deeply.
"""

from __future__ import annotations

import warnings
import os
from importlib import resources
from pathlib import Path

from ..errors import SourceError, UsageError
from ..ir import expr as E
from ..ir.combiners import COMBINERS
from ..ir.grammar import error_at, parse
from ..ir.parser import TermBuilder
from .ast import Guard, Phase, RuleDef, RuleSet, SourceLoc
from .vocabulary import ACTION_GUARDS, ACTIONS, DEPRECATED_ACTIONS, GUARDS


def shipped_rulesets_dir() -> Path:
    return Path(str(resources.files("blockbuster.rulesets")))


def default_rules_path() -> Path:
    return shipped_rulesets_dir() / "default.bbr"


def read_text(path: Path, where: SourceError | None = None) -> str:
    data = path.read_bytes()
    if b"\0" in data:
        raise SourceError("not a text file (it contains NUL bytes)", str(path), 1, 1)
    try:
        # A byte-order mark (what some Windows editors write first) is not text.
        return data.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise SourceError(f"not a text file (invalid UTF-8 at byte {err.start})",
                          str(path), line, 1) from None


class _PatternBuilder(TermBuilder):
    """Builds patterns: bare names are pattern variables; binders bind ``k`` and ``R``."""

    def __init__(self, text, filename, withs=None, lhs=True):
        super().__init__(text, filename)
        self.withs = withs if withs is not None else {}
        self.lhs = lhs
        self.names: set[str] = set()          # pattern variables seen
        self.binder_vars: set[str] = set()
        self.ranges: set[str] = set()
        self.refs: list[tuple[str, object]] = []
        self.subranged: list = []             # range tokens used as R[lo : hi]
        self.uses: list[tuple[str, str, object]] = []   # (kind, name, token), in order
        self.scope: list[str] = []            # loop variables of the enclosing binders

    def resolve_ref(self, name, node):
        if name in self.withs:
            return self.withs[name]
        self.names.add(name)
        self.refs.append((name, node))
        self.uses.append(("value", name, node))
        return E.Expr("pvar", (), name)

    def check_kinds(self, bound_kinds: dict[str, str] | None = None) -> dict[str, str]:
        """Each name is one kind of thing (a value, a loop variable or a range), the
        same on both sides of the rule; returns name -> kind."""
        kinds = dict(bound_kinds or {})
        words = {"value": "a pattern variable (a value)", "var": "a loop variable",
                 "range": "a range"}
        for kind, name, tok in self.uses:
            first = kinds.setdefault(name, kind)
            if first != kind:
                raise self.error(tok, f"'{name}' is {words[first]}, used here as "
                                      f"{words[kind]}")
        return kinds

    def build(self, tree):
        if tree.data == "load":
            raise self.error(tree, "loads cannot appear in rewrite rules: rules are generic, "
                                   "match the value with a pattern variable instead")
        return super().build(tree)

    def build_call(self, tree, name, args):
        if name == "runmax" and len(args) == 1 and args[0].data == "ref":
            var = str(args[0].children[0])
            if var not in self.scope:
                raise self.error(args[0].children[0], f"runmax({var}) outside a binder "
                                 f"over '{var}': it is the running max of the enclosing "
                                 f"online_softmax({var} in ...)")
            self.uses.append(("var", var, args[0].children[0]))
            if self.lhs:
                self.binder_vars.add(var)
            else:
                self.refs.append((var, args[0].children[0]))
            return E.runmax(var)
        return super().build_call(tree, name, args)

    def build_binder(self, tree):
        name, var, rng = tree.children[:3]
        if str(name) != "map" and str(name) not in COMBINERS:
            raise self.error(tree.children[0], f"unknown combiner '{name}' "
                             f"(known: {', '.join(COMBINERS)}, and map)")
        if rng.data != "full_range":
            if self.lhs:
                raise self.error(rng, "a pattern matches a reduction's whole range: "
                                      f"write '{var} in {rng.children[0]}'")
            # A replacement may reduce over the first blocks of a matched range
            # (``k in R[: 1]``): constant bounds only, and only of a whole range.
            _dim, lo, _colon, hi = rng.children
            for bound in (lo, hi):
                if bound is not None and bound.data != "iconst":
                    raise self.error(bound, "a sub-range of a matched range takes constant "
                                            f"bounds, e.g. '{var} in {rng.children[0]}[: 1]'")
            self.subranged.append(rng.children[0])
        if self.lhs:
            self.binder_vars.add(str(var))
            self.ranges.add(str(rng.children[0]))
        else:
            self.refs.append((str(var), var))
            self.refs.append((str(rng.children[0]), rng.children[0]))
        self.uses.append(("var", str(var), var))
        self.uses.append(("range", str(rng.children[0]), rng.children[0]))
        self.scope.append(str(var))
        try:
            return super().build_binder(tree)
        finally:
            self.scope.pop()


def _check_vocabulary(table, unknown_word, word, tok, args, text, filename) -> None:
    """The name is in the vocabulary ``table`` and gets its number of arguments."""
    name = str(tok)
    if name not in table:
        raise error_at(tok, f"unknown {unknown_word} '{name}' (known: {', '.join(table)})",
                       text, filename)
    params = table[name][0]
    if len(args) != len(params):
        raise error_at(tok, f"{word} '{name}' takes {len(params)} argument"
                            f"{'s' if len(params) != 1 else ''}, got {len(args)}",
                       text, filename)


class RuleFileLoader:
    def __init__(self):
        self.rules: dict[str, RuleDef] = {}
        self.phases: list[Phase] = []
        self.schedule: tuple[str, ...] | None = None
        self.schedule_loc: tuple | None = None
        self.files: list[str] = []
        self._loaded: set[Path] = set()
        self._phase_refs: list[tuple] = []     # guards naming a phase, checked at the end
        self._rule_toks: dict[str, tuple] = {}  # rule -> (name token, text, file), for errors
        self._schedules: dict[str, int] = {}    # file -> the line of its schedule
        self._phase_toks: dict[str, tuple] = {}  # phase -> (name token, text, file)
        self._schedule_at: tuple | None = None   # (file, phases before it, line)
        self._including: list[tuple] = []       # (file, include token, text), outermost first

    # -- files -----------------------------------------------------------------
    def load_file(self, path: Path, display: str | None = None) -> None:
        path = Path(path)
        display = display or str(path)
        resolved = path.resolve()
        if resolved in self._loaded:
            return                      # included twice (or a cycle): load once
        self._loaded.add(resolved)
        if path.is_dir():
            raise SourceError("a directory, not a rule file", display)
        if not path.is_file():
            shipped = shipped_rulesets_dir() / path.name
            if path.parent in (Path("."), Path("rulesets")) and shipped.is_file():
                # `rules check rulesets/default.bbr` (as the README writes it) outside a
                # checkout: the shipped rule set, as `include "default.bbr"` finds it.
                return self.load_file(shipped)
            names = ", ".join(sorted(p.name for p in shipped_rulesets_dir().glob("*.bbr")))
            raise SourceError(f"no such rule file (the shipped rule sets, found by name: "
                              f"{names})", display)
        text = read_text(path)
        self.files.append(display)
        self.load_text(text, display, base=path.parent)

    def load_text(self, text: str, filename: str, base: Path | None = None) -> None:
        tree = parse(text, "rulefile", filename)
        # Where each rule and phase of this file is declared: a name used before its
        # declaration is told so, not called unknown.
        outer = getattr(self, "_declared", {})      # an including file's
        self._declared = {(item.data, str(item.children[0])): item.children[0].line
                          for item in tree.children if item.data in ("rule", "phase")}
        try:
            for item in tree.children:
                handler = getattr(self, f"_{item.data}")
                handler(item, text, filename, base)
        finally:
            self._declared = outer

    def _unknown(self, kind: str, tok) -> str:
        """``unknown rule 'a'``, or where ``a`` is declared later in this file, that."""
        line = getattr(self, "_declared", {}).get((kind, str(tok)))
        if line is not None and line > tok.line:
            return (f"{kind} '{tok}', which is declared later (line {line}): declare a "
                    f"{kind} before the line that names it")
        return f"unknown {kind} '{tok}'"

    # -- items -----------------------------------------------------------------
    def _include(self, item, text, filename, base):
        # Relative to the including file first, then the shipped rule sets.
        raw = str(item.children[0])[1:-1]
        if not raw.strip():
            raise error_at(item.children[0], "include names no file", text, filename)
        local = (base or Path.cwd()) / raw
        shipped = shipped_rulesets_dir() / raw
        if local.is_file() or shipped.is_file():
            self._including.append((filename, item.children[0], text))
            try:
                if local.is_file():
                    return self.load_file(local, str(Path(filename).parent / raw))
                return self.load_file(shipped)
            finally:
                self._including.pop()
        if local.is_dir():
            raise error_at(item.children[0], f"included {raw} is a directory, not a rule file",
                           text, filename)
        raise error_at(item.children[0], f"included file not found: {raw}", text, filename)

    def _rule(self, item, text, filename, base):
        name_tok, body, guard = item.children
        name = str(name_tok)
        loc = SourceLoc(filename, name_tok.line, name_tok.column)
        if name in self.rules:
            first = self.rules[name].loc
            raise error_at(name_tok, f"duplicate rule name '{name}' (first defined at {first})",
                           text, filename)
        rule_text = text[item.meta.start_pos:item.meta.end_pos]
        if body.data == "rewrite":
            rule = self._rewrite_rule(name, loc, body, guard, text, filename, rule_text)
        else:
            rule = self._action_rule(name, loc, body, guard, text, filename, rule_text)
        self.rules[name] = rule
        self._rule_toks[name] = (name_tok, text, filename)

    def _rewrite_rule(self, name, loc, body, guard, text, filename, rule_text):
        lhs_tree, rhs_tree, *with_trees = body.children
        if lhs_tree.data == "ref":
            raise error_at(lhs_tree, "a pattern must start with an operator, not a bare "
                                     "variable", text, filename)
        lhs_b = _PatternBuilder(text, filename)
        lhs = lhs_b.build(lhs_tree)
        kinds = lhs_b.check_kinds()
        bound = lhs_b.names | lhs_b.binder_vars | lhs_b.ranges
        withs: dict = {}
        rhs_b = _PatternBuilder(text, filename, withs, lhs=False)
        with_names = [str(w.children[0]) for w in with_trees]
        for w in with_trees:
            wname, wexpr = w.children
            if str(wname) in bound or str(wname) in withs:
                raise error_at(wname, f"'{wname}' is already bound in this rule", text, filename)
            start = len(rhs_b.refs)
            withs[str(wname)] = rhs_b.build(wexpr)
            for ref, node in rhs_b.refs[start:]:    # the pattern and earlier withs only
                if ref == str(wname):
                    raise error_at(node, f"'with {ref} = ...' uses '{ref}' in its own "
                                         "definition", text, filename)
                if ref in with_names and ref not in withs:
                    raise error_at(node, f"'{ref}' is used before the 'with' that defines "
                                         "it (a 'with' may use the pattern's variables and "
                                         "earlier 'with' names)", text, filename)
        rhs = rhs_b.build(rhs_tree)
        for ref, node in rhs_b.refs:
            if ref not in bound and ref not in withs:
                raise error_at(node, f"right-hand side uses '{ref}', which the pattern does "
                                     "not bind", text, filename)
        rhs_b.check_kinds(kinds)
        guards = self._guards(guard, text, filename,
                              {"expr": lhs_b.names, "var": lhs_b.binder_vars,
                               "range": lhs_b.ranges})
        whole = {g.args[0] for g in guards if g.name == "whole" and not g.negated}
        for tok in rhs_b.subranged:
            if str(tok) not in whole:
                raise error_at(tok, f"a sub-range of '{tok}' needs the guard whole({tok}) "
                                    "(its bounds are relative to the dimension's start)",
                               text, filename)
        return RuleDef(name, loc, "rewrite", guards, lhs=lhs, rhs=rhs, text=rule_text)

    def _action_rule(self, name, loc, body, guard, text, filename, rule_text):
        action_tok, *args = body.children
        args = [a for a in args if a is not None]
        action = str(action_tok)
        if action in DEPRECATED_ACTIONS:
            new = DEPRECATED_ACTIONS[action]
            warnings.warn(f"{filename}:{action_tok.line}:{action_tok.column}: action '{action}' "
                          f"is deprecated, use '{new}'", DeprecationWarning, stacklevel=2)
            action_tok = action_tok.update(value=new)
            action = new
        _check_vocabulary(ACTIONS, "action", "action", action_tok, args, text, filename)
        guards = self._guards(guard, text, filename, {"array": {str(a) for a in args}})
        return RuleDef(name, loc, "action", guards, action=action,
                       action_args=tuple(str(a) for a in args), text=rule_text)

    def _guards(self, guard, text, filename, names_by_kind) -> tuple[Guard, ...]:
        if guard is None:
            return ()
        out = []
        for pred in guard.children:
            negated = False
            while pred.data == "negated":
                negated = not negated
                pred = pred.children[0]
            name_tok, *args = pred.children
            args = [a for a in args if a is not None]
            gname = str(name_tok)
            _check_vocabulary(GUARDS, "guard predicate", "guard", name_tok, args, text, filename)
            if gname in ACTION_GUARDS and "array" not in names_by_kind:
                raise error_at(name_tok, f"guard '{gname}' prices an action's result: only "
                                         "an 'apply' rule can take it", text, filename)
            kinds = GUARDS[gname][0]
            names = []
            for arg, kind in zip(args, kinds):
                if arg.data != "ref":
                    raise error_at(arg.meta, f"guard '{gname}' takes names, not expressions",
                                   text, filename)
                aname = str(arg.children[0])
                if kind == "phase":     # phases may be declared later: checked at the end
                    self._phase_refs.append((aname, arg.children[0], text, filename))
                    names.append(aname)
                    continue
                allowed = names_by_kind.get(kind, set())
                if aname not in allowed:
                    what = {"expr": "a pattern variable", "var": "a loop variable bound by "
                            "the pattern", "range": "a range bound by the pattern",
                            "array": "the action's array"}[kind]
                    raise error_at(arg.children[0], f"guard '{gname}': '{aname}' is not "
                                                    f"{what}", text, filename)
                names.append(aname)
            out.append(Guard(gname, tuple(names), negated))
        return tuple(out)

    def _phase(self, item, text, filename, base):
        name_tok, *rule_toks = item.children
        if any(p.name == str(name_tok) for p in self.phases):
            raise error_at(name_tok, f"duplicate phase name '{name_tok}'", text, filename)
        seen: set[str] = set()
        for tok in rule_toks:
            if str(tok) in seen:
                raise error_at(tok, f"phase '{name_tok}' names rule '{tok}' twice", text,
                               filename)
            seen.add(str(tok))
            if str(tok) not in self.rules:
                raise error_at(tok, f"phase '{name_tok}' names {self._unknown('rule', tok)}",
                               text, filename)
        self.phases.append(Phase(str(name_tok), tuple(str(t) for t in rule_toks),
                                 SourceLoc(filename, name_tok.line, name_tok.column)))
        self._phase_toks[str(name_tok)] = (name_tok, text, filename)

    def _schedule(self, item, text, filename, base):
        first = self._schedules.get(filename)
        if first is not None:        # an included file's schedule is replaced, not this
            raise error_at(item, f"a second schedule in this file (the first is at line "
                                 f"{first}); a rule file has at most one", text, filename)
        self._schedules[filename] = item.meta.line
        owner = self._schedule_at[0] if self._schedule_at is not None else None
        for including, tok, including_text in self._including:
            if including == owner:      # an included file would replace its includer's
                raise error_at(tok, f"this file's schedule (line {self._schedules[owner]}) "
                                    f"would be replaced by the included file's ({filename}:"
                                    f"{item.meta.line}): include it before the schedule",
                               including_text, including)
        known = {p.name for p in self.phases}
        for tok in item.children:
            if str(tok) not in known:
                raise error_at(tok, f"schedule names {self._unknown('phase', tok)}", text,
                               filename)
        self.schedule = tuple(str(t) for t in item.children)
        # Phases declared before it in included files may be left out on purpose (a
        # subset of the default set); the file's own phases, and later ones, not.
        self._schedule_at = (filename, len(self.phases), item.meta.line)

    def _check_phases_run(self) -> None:
        """A rule whose phases neither the schedule nor a guard (lookahead) names never
        runs: an error, as a rule in no phase is, for the phases of the schedule's own
        file and those declared after it (an included file's may be left out on
        purpose, its rules with them)."""
        if self._schedule_at is None:
            return          # no schedule: every phase runs, in declaration order
        filename, before, line = self._schedule_at
        runs = set(self.schedule) | {ref[0] for ref in self._phase_refs}
        running = {r for p in self.phases if p.name in runs for r in p.rules}
        for n, phase in enumerate(self.phases):
            if phase.name in runs or (n < before and phase.loc.file != filename):
                continue
            lost = [r for r in phase.rules if r not in running]
            if not lost:
                continue    # its rules all run in other phases
            tok, text, phase_file = self._phase_toks[phase.name]
            hint = ("name it in the schedule" if phase_file == filename else
                    "write a schedule in this file that names it (a later schedule "
                    "replaces an included one)")
            rules = (f"rule '{lost[0]}'" if len(lost) == 1 else
                     "rules " + ", ".join(f"'{r}'" for r in lost))
            raise error_at(tok, f"phase '{phase.name}' is not in the schedule ({filename}:"
                                f"{line}: {', '.join(self.schedule)}) and no guard names it, "
                                f"so its {rules} would never run: {hint}", text, phase_file)

    def result(self) -> RuleSet:
        known = {p.name for p in self.phases}
        for name, tok, text, filename in self._phase_refs:
            if name not in known:
                raise error_at(tok, f"guard names unknown phase '{name}'", text, filename)
        phases = tuple(self.phases)
        in_phase = {r for p in phases for r in p.rules}
        for name in self.rules:     # a rule in no phase would silently never run
            if phases and name not in in_phase:
                tok, text, filename = self._rule_toks[name]
                raise error_at(tok, f"rule '{name}' is in no phase, so it would never run: "
                                    "name it in a phase (and that phase in the schedule)",
                               text, filename)
        self._check_phases_run()
        if not phases:      # no phases: every rule in one phase, in file order
            phases = (Phase("all", tuple(self.rules), SourceLoc("<implicit>", 0, 0)),)
        schedule = self.schedule or tuple(p.name for p in phases)
        return RuleSet(dict(self.rules), phases, schedule, tuple(self.files))


def load_rules(*paths) -> RuleSet:
    """Load and check rule files (later files may refer to earlier files' rules)."""
    if not paths:
        raise UsageError("load_rules: no rule files given (the default rules: "
                         "blockbuster.fuse(program) without rules=)")
    for p in paths:
        if not isinstance(p, (str, os.PathLike)) or not str(p).strip():
            hint = (" (several files are separate arguments: load_rules(*paths))"
                    if isinstance(p, (list, tuple)) else "")
            raise UsageError(f"load_rules: expected a rule file path (str or pathlib.Path), "
                             f"got {p!r}{hint}")
        if isinstance(p, str) and ("=>" in p or "\n" in p) and not Path(p).exists():
            raise UsageError("load_rules: takes rule file paths, and this looks like rule "
                             "text (load_rules_text(text) in blockbuster.dsl.loader reads "
                             "text)")
    loader = RuleFileLoader()
    for p in paths:
        loader.load_file(Path(p))
    if paths and not loader.rules:
        # An empty file (or one of comments) would fuse nothing, silently.
        raise SourceError("no rules in this file (a rule set with no rules fuses nothing)"
                          if len(paths) == 1 else
                          "no rules in these files (a rule set with no rules fuses nothing)",
                          ", ".join(str(p) for p in paths))
    return loader.result()


def load_rules_text(text: str, filename: str = "<rules>") -> RuleSet:
    loader = RuleFileLoader()
    loader.load_text(text, filename, base=None)
    return loader.result()


def default_rules() -> RuleSet:
    return load_rules(default_rules_path())
